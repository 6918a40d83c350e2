#!/usr/bin/env bash
# Fit the shipped H200 profile and validate it on measurements the fit never saw.
#   calibration data: benchmarks/measurements/h200-sxm/calib-*.jsonl and collectives.jsonl
#   held out:         holdout.jsonl and holdout2.jsonl (random shapes from seeds the
#                     calibration suites never use) and decoder-layers.jsonl (whole
#                     layers; no fit uses them)
set -euo pipefail
cd "$(dirname "$0")/.."
d=benchmarks/measurements/h200-sxm
rooflinesim calibrate "$d"/calib-*.jsonl "$d"/collectives.jsonl --gpu h200-sxm \
  -o hardware_specs/profiles/h200-sxm.yaml --force
held=("$d"/holdout.jsonl "$d"/holdout2.jsonl)
rooflinesim validate "${held[@]}" "$d"/decoder-layers.jsonl --gpu h200-sxm --worst 5
rooflinesim validate "${held[@]}" "$d"/decoder-layers.jsonl --gpu h200-sxm --worst 0 --by mode
rooflinesim validate "${held[@]}" --gpu h200-sxm --worst 0 --by backend
