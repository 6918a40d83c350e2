"""`rooflinesim harness run`, `rooflinesim calibrate` and `rooflinesim validate`."""

from __future__ import annotations

import sys

import click

from .common import (MAX_SIZE, Size, echo, emit_json, gpu_options, json_option, load_gpu, load_profile,
                     profile_label, table)

MAX_FOLDS = 100


@click.group()
def harness():
    """Measure real kernels on this machine's GPU (or CPU) into JSON Lines."""


@harness.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                   "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run(args):
    """Run measurement suites (`rooflinesim harness run --help` for the options)."""
    from ..harness.cli import main as harness_main

    listing = "--list" in args
    rc = harness_main(["run", *args], call_s=_h200_call_s() if listing else None)
    sys.exit(rc or 0)


def _h200_call_s():
    """The seconds of one call of each harness case, as the calibrated H200 model predicts
    it in a CUDA graph (the listing's time estimates): ``call_s(cases, world_size)``, the
    cases of one kind priced in one vectorized call."""
    from ..calibration.profile import resolve_profile
    from ..calibration.records import COLLECTIVES
    from ..calibration.validate import predict_records
    from ..hardware import load_spec

    spec = load_spec("h200")
    profile = resolve_profile(spec, None)

    def call_s(cases, world_size):
        recs = [{**c, "graph": True, **({"world_size": world_size} if c["op"] in COLLECTIVES else {})}
                for c in cases]
        # (an op the model has none for: the harness's protocol alone)
        return [t or 0.0 for _, t, _ in predict_records(recs, spec, profile)]

    return call_s


def _base_profile(spec, base: str):
    """``calibrate --base``: (the profile that stands where the records fit nothing, None for
    the ideal one; how the profile's provenance names it)."""
    from ..calibration.profile import resolve_profile, transferred_profile

    found = transferred_profile(spec, lender_other_than=spec.name) if base == "auto" else \
        None if base == "none" else resolve_profile(spec, base)
    if found is None or found.kind == "ideal":
        return None, "ideal"
    if base == "auto":
        return found, f"transferred from {found.provenance.get('transferred_from')}"
    return found, base + (f" (fitted on {found.gpu})" if found.gpu and found.gpu != base else "")


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@gpu_options
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Profile YAML to write.")
@click.option("--force", is_flag=True, help="Overwrite an existing profile file.")
@click.option("--folds", type=Size(min=2, max=MAX_FOLDS), default=5, show_default=True,
              help="Cross-validation folds over shapes.")
@click.option("--base", default="auto", show_default=True, metavar="auto|none|PROFILE",
              help="Where the measurements fit nothing (a kernel, collective or host key no record "
                   "reaches), the parameters of: auto, the profile this GPU gets unmeasured (another "
                   "measured GPU's, transferred through its spec); none, the ideal roofline's; or a "
                   "bundled GPU's profile or a YAML path.")
def calibrate(files, gpu, spec_files, output, force, folds, base):
    """Fit a calibration profile to measurements; report its error on held-out shapes."""
    from pathlib import Path

    from ..calibration import fit, records
    from ..files import output_path

    out = output_path(output, "profile", force)
    spec = load_gpu(gpu, spec_files)
    meas = records.load(files)
    start, label = _base_profile(spec, base)
    profile, cv = fit.fit_profile(meas, spec, folds=folds, sources=[Path(f).name for f in files], base=start,
                                  base_label=label)
    fit.write_profile(profile, out)
    prov = profile.provenance
    counts = ", ".join(f"{f} {n}" for f, n in prov["records_per_family"].items() if n)
    click.echo(f"wrote {out}: {sum(s['n'] for s in cv.values())} measurements (records per "
               f"family: {counts}), {folds}-fold cross-validated error on held-out shapes:")
    echo(_stats_table(cv))
    by_reason: dict[str, list[str]] = {}
    for family, why in prov.get("prior_kept", {}).items():
        by_reason.setdefault(why, []).append(family)
    # (serve's intervals: the base's cross-validated error for the ops this fit did not validate)
    carried = ", with that profile's cross-validated error" if profile.validation.get("base_cross_validated") else ""
    for why, families in by_reason.items():
        click.echo(f"not fitted: {', '.join(families)} ({why}{carried})")
    for note in [prov[k] for k in ("left_out",) if k in prov] + prov.get("hardware_notes", []):
        click.echo(f"note: {note}")
    _warn(meas)


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@gpu_options
@click.option("--profile", default=None, help="Profile to validate (default: the GPU's own).")
@click.option("--worst", type=Size(min=0, max=MAX_SIZE), default=8, show_default=True,
              help="Worst cases to list.")
@click.option("--by", default=None, metavar="FIELD",
              help="Split each op's statistics by a record field, e.g. mode, backend or dtype.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Also write a predicted-vs-measured chart (self-contained HTML).")
@click.option("--force", is_flag=True, help="Overwrite an existing --plot file.")
@json_option
def validate(files, gpu, spec_files, profile, worst, by, plot, force, as_json):
    """Predict measured records and report the error per op."""
    from ..calibration import records
    from ..calibration.validate import reasons
    from ..calibration.validate import validate as run_validate
    from ..errors import UserError

    if plot is not None:
        from ..files import output_path

        output_path(plot, "plot", force)
    spec = load_gpu(gpu, spec_files)
    prof = load_profile(spec, profile)
    meas = records.load(files)
    rep = run_validate(meas, spec, prof, profile or profile_label(prof), by=by)
    if not rep.rows:
        raise UserError(f"no record could be predicted on {spec.name}: "
                        + (reasons(rep.skipped) if rep.skipped else "the files hold no measurements"))
    if plot is not None:
        from ..charts import validation_figure, write_html

        write_html(validation_figure(rep), plot)
    _warn(meas)
    if as_json:
        emit_json(rep.as_dict(worst))
        return
    click.echo(f"{len(rep.rows)} records predicted on {spec.name} [profile: {profile_label(prof)}]")
    for note in rep.notes:
        click.echo(f"note: {note}")
    echo(_stats_table(rep.ops))
    if worst and rep.rows:
        click.echo("\nworst cases:")
        echo(table([(r["op"], r["case"][:70], f"{r['measured_s'] * 1e6:.1f}",
                     f"{r['predicted_s'] * 1e6:.1f}", f"{100 * r['error']:+.1f}%")
                    for r in rep.worst(worst)],
                   headers=("op", "case", "measured µs", "predicted µs", "error")))
    if rep.skipped:
        click.echo(f"\n{len(rep.skipped)} records not predicted:")
        reasons: dict[str, int] = {}
        for s in rep.skipped:
            key = f"{s['op']}: {s['reason']}"
            reasons[key] = reasons.get(key, 0) + 1
        for key, count in sorted(reasons.items(), key=lambda x: -x[1])[:12]:
            click.echo(f"  {count:5d}  {key}")


def _warn(meas) -> None:
    for w in meas.warnings:
        click.echo(f"warning: {w}", err=True)


def _stats_table(ops: dict) -> str:
    return table([(op, s["n"], f"{100 * s['median_ape']:.1f}%", f"{100 * s['p90_ape']:.1f}%",
                   f"{100 * s['max_ape']:.1f}%", f"{100 * s['bias']:+.1f}%") for op, s in ops.items()],
                 headers=("op", "n", "median |err|", "p90 |err|", "max |err|", "bias"))
