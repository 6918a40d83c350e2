"""The requests a serving benchmark sends: arrival times and lengths, seeded and reproducible,
with the semantics of vLLM's benchmark client (``vllm bench serve`` / benchmark_serving.py):

* arrivals: ``rate`` requests per second with gamma inter-arrival gaps of shape
  ``burstiness`` and mean 1 / rate (burstiness 1: Poisson), rescaled as vllm bench serve
  has since 0.10 (vllm-project/vllm PR 21108) so that the run's rate is the one asked for
  (``fill``), the first request at t = 0; ``rate`` inf sends every request at t = 0;
  or a ramp (``ramp``, vLLM's ``--ramp-up-strategy``): request i of n at a rate from a
  start to an end rate, linear or exponential in i / (n - 1), its gap drawn at that rate;
* lengths of the random dataset: input and output lengths drawn as whole numbers uniform in
  [L (1 - r), L (1 + r)] (the range ratio r in [0, 1), vLLM >= 0.8.4), at least 1;
* a trace: arrival time, input and output tokens per request (CSV with a header, or JSON
  Lines), under our names or those of the Azure LLM inference traces
  (TIMESTAMP, ContextTokens, GeneratedTokens);
* a public traffic shape (``DATASETS``): the (input, output) token pairs of a released trace,
  shipped as data with its source (``rooflinesim/data/traffic-*.json``), drawn without
  replacement while there are enough (as vLLM samples a dataset), sent at ``rate``;
* shared prefixes (what an engine's prefix cache can reuse): ``prefix_len`` tokens before
  each prompt, one of ``num_prefixes`` different ones drawn uniformly per request (vLLM's
  random dataset with ``--random-prefix-len``, one prefix; its ``prefix_repetition`` and
  SGLang's ``generated-shared-prefix`` datasets, several); a trace may say so per request
  (columns prefix_id and prefix_tokens, the prefix counted in the input tokens; or, in
  Mooncake's format, hash_ids: a hash per block, each block's the prefix through it).
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from ..errors import UserError

MAX_REQUESTS = 10_000_000
MAX_TOKENS = 10_000_000  # tokens of one request's input or output
# a trace file's size: public traces run to megabytes (Mooncake's FAST'25 traces, a day of
# the Azure LLM inference traces), and a file of MAX_REQUESTS rows to a few hundred
MAX_TRACE_BYTES = 256 * 1024 * 1024
# the longest span of arrivals simulated: a clock in float64 seconds resolves 1e9 s to 1.2e-7 s
MAX_SPAN_S = 1e9


def check_span(span_s: float) -> None:
    """Requests arriving over ``span_s`` seconds can be simulated, or one sentence why not."""
    if not span_s <= MAX_SPAN_S:  # (nan and inf too: a rate so low that its gaps overflow)
        raise UserError(f"the requests arrive over {span_s:.3g} s, more than the {MAX_SPAN_S:.0e} s (about 30 years) "
                        f"over which the simulation's clock resolves a step to well under a microsecond: raise the "
                        f"rate or send fewer requests")


@dataclass(frozen=True)
class Requests:
    """Requests in order of arrival: when each arrives (s, from the first) and its input
    and output tokens; where prompts share prefixes, each request's prefix (an id, -1 for
    none) and its tokens, counted in its input tokens. Prefixes may nest: with a column per
    level (arrays of shape (requests, levels)), each level's prefix extends the one before
    (more tokens), its ids its own (a system prompt shared by a group, then the whole prompt where requests
    repeat one, as inference-perf's shared-prefix dataset sends them)."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_id: np.ndarray | None = None
    prefix_tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    def take(self, index) -> "Requests":
        """The requests at ``index`` (a slice or an array of positions, in order)."""
        part = (None if x is None else x[index] for x in (self.prefix_id, self.prefix_tokens))
        return Requests(self.arrival_s[index], self.input_tokens[index], self.output_tokens[index], *part)

    def then(self, later: "Requests", start_s: float) -> "Requests":
        """These requests, then ``later``'s from ``start_s`` on (its arrivals shifted so); the
        prefix columns padded with none where one side has fewer levels."""
        n, m = len(self), len(later)
        if self.prefix_id is None and later.prefix_id is None:
            part = (None, None)
        else:
            sides = [r._levels() for r in (self, later)]
            levels = max(ids.shape[1] for ids, _ in sides)
            ids, tokens = (np.concatenate([np.pad(side[k], ((0, 0), (0, levels - side[k].shape[1])),
                                                  constant_values=-1 if k == 0 else 0) for side in sides])
                           for k in (0, 1))
            part = (ids[:, 0], tokens[:, 0]) if levels == 1 else (ids, tokens)
        return Requests(np.concatenate([self.arrival_s, later.arrival_s + float(start_s)]),
                        np.concatenate([self.input_tokens, later.input_tokens]),
                        np.concatenate([self.output_tokens, later.output_tokens]), *part) if n + m else self

    def _levels(self) -> tuple:
        """The prefix ids and tokens as (requests, levels) arrays (no levels: none)."""
        n = len(self)
        if self.prefix_id is None:
            return np.zeros((n, 0), dtype=np.int64), np.zeros((n, 0), dtype=np.int64)
        return self.prefix_id.reshape(n, -1), self.prefix_tokens.reshape(n, -1)

    def longest_prefix(self) -> np.ndarray:
        """Each request's longest shared prefix, in tokens (0: none)."""
        if self.prefix_id is None:
            return np.zeros(len(self), dtype=np.int64)
        n = len(self)
        ids, tokens = self.prefix_id.reshape(n, -1), self.prefix_tokens.reshape(n, -1)
        return np.where(ids >= 0, tokens, 0).max(axis=1)

    def with_prefixes(self, prefix_len: int, num_prefixes: int, seed: int) -> "Requests":
        """These requests with one of ``num_prefixes`` shared prefixes of ``prefix_len``
        tokens before each prompt (drawn uniformly, seeded); unchanged for a length of 0."""
        if prefix_len == 0:
            return self
        if not (1 <= num_prefixes <= MAX_REQUESTS and 1 <= prefix_len <= MAX_TOKENS):
            raise UserError(f"the number of prefixes must be 1 to {MAX_REQUESTS:,} and their length 0 to "
                            f"{MAX_TOKENS:,} tokens (got {num_prefixes} of {prefix_len})")
        n = len(self)
        ids = np.random.default_rng([seed, 1]).integers(0, num_prefixes, size=n)
        return Requests(self.arrival_s, self.input_tokens + prefix_len, self.output_tokens, ids,
                        np.full(n, prefix_len, dtype=np.int64))


def with_warmups(reqs: Requests, count: int, start_s: float) -> Requests:
    """vLLM bench serve's ``--num-warmups``: ``count`` copies of the first request, all sent at
    t = 0 (its client caps them at --max-concurrency in flight), then ``reqs`` from ``start_s``
    on (when the copies have finished: its client waits for them). A copy sends the first
    request's prompt token for token, so a prefix cache holds that prompt for it: the first
    request and its copies share a prefix of its whole prompt (one more level of nested
    prefixes where it had a shorter one)."""
    if count == 0:
        return reqs
    first = reqs.take(slice(0, 1))
    whole = int(first.input_tokens[0])
    if int(first.longest_prefix()[0]) < whole:
        ids, tokens = (x.copy() for x in reqs._levels())
        free = np.flatnonzero(ids[0] < 0)
        level = int(free[0]) if free.size else ids.shape[1]
        if level == ids.shape[1]:
            ids = np.pad(ids, ((0, 0), (0, 1)), constant_values=-1)
            tokens = np.pad(tokens, ((0, 0), (0, 1)))
        ids[0, level], tokens[0, level] = ids[:, level].max() + 1, whole
        part = (ids[:, 0], tokens[:, 0]) if ids.shape[1] == 1 else (ids, tokens)
        reqs = Requests(reqs.arrival_s, reqs.input_tokens, reqs.output_tokens, *part)
    copies = reqs.take(np.zeros(count, dtype=np.int64))
    return Requests(np.zeros(count), copies.input_tokens, copies.output_tokens, copies.prefix_id,
                    copies.prefix_tokens).then(reqs, start_s)


RAMPS = ("linear", "exponential")


def ramp_rates(n: int, ramp: tuple) -> np.ndarray:
    """vLLM bench serve's ramp-up: request i's rate, ``ramp`` = (strategy, start, end) in
    requests per second, linear or exponential in i / (n - 1) (vllm/benchmarks/serve.py,
    _get_current_request_rate)."""
    strategy, start, end = ramp
    if strategy not in RAMPS:
        raise UserError(f"unknown ramp-up strategy {strategy!r}; known: {', '.join(RAMPS)}")
    if not (0 < start <= end and math.isfinite(end)):
        raise UserError(f"a ramp-up's start rate must be above 0 and at most its end rate, both finite "
                        f"(got {start!r} to {end!r} requests/s)")
    progress = np.arange(n) / max(n - 1, 1)
    if strategy == "linear":
        return start + (end - start) * progress
    return start * (end / start) ** progress


def arrivals(n: int, rate: float, burstiness: float, rng: np.random.Generator, *, fill: bool = True,
             ramp: tuple | None = None) -> np.ndarray:
    """Arrival times of ``n`` requests, the first at 0: gamma gaps of shape ``burstiness``
    and mean 1 / ``rate``; all at 0 for an infinite rate. ``fill`` (vllm bench serve since
    0.10, PR 21108): a gap before every request, the n gaps rescaled to add up to n / rate,
    the first then not counted (sent at 0 here); without, n - 1 gaps as drawn (SGLang's
    bench_serving, vLLM's benchmark_serving.py before). ``ramp`` (strategy, start, end):
    each request's gap drawn at its own rate (``ramp_rates``), not rescaled, as vLLM's
    client does with --ramp-up-strategy; ``rate`` is then not used."""
    if not (burstiness > 0 and math.isfinite(burstiness)):
        raise UserError(f"the burstiness must be a finite number above 0 (got {burstiness!r})")
    if ramp is not None:
        rates = ramp_rates(n, ramp)
        t = np.cumsum(rng.gamma(shape=burstiness, scale=1.0 / (rates * burstiness)))
        return t - t[0]
    if not rate > 0:
        raise UserError(f"the request rate must be above 0 (got {rate!r})")
    if math.isinf(rate):
        return np.zeros(n)
    if not fill:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=max(n - 1, 0))
        return np.concatenate([[0.0], np.cumsum(gaps)])
    t = np.cumsum(rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n))
    t *= (n / rate) / t[-1]
    return t - t[0]


CLIENTS = ("vllm", "sglang")  # the benchmark clients whose random dataset and arrivals are re-created


def rescales_gaps(client: str) -> bool:
    """Whether ``client`` rescales its gaps to the rate (``arrivals``' ``fill``): vLLM's
    client does, SGLang's sends them as drawn."""
    if client not in CLIENTS:
        raise UserError(f"unknown benchmark client {client!r}; known: {', '.join(CLIENTS)}")
    return client == "vllm"


def random_lengths(n: int, length: int, range_ratio: float, rng: np.random.Generator,
                   client: str = "vllm") -> np.ndarray:
    """``n`` whole lengths, at least 1: uniform in [L (1 - r), L (1 + r)] as vLLM's random
    dataset draws them (r in [0, 1)), or in [r L, L] as SGLang's bench_serving does (r in
    [0, 1]: 1 is L exactly, 0 anything from 1 to L)."""
    if not rescales_gaps(client):  # (SGLang's)
        if not 0 <= range_ratio <= 1:
            raise UserError(f"SGLang's range ratio must be in [0, 1] (got {range_ratio!r})")
        return rng.integers(max(int(length * range_ratio), 1), length + 1, size=n)
    if not 0 <= range_ratio < 1:
        raise UserError(f"vLLM's range ratio must be in [0, 1) (got {range_ratio!r}; SGLang's client, --client sglang, takes 1)")
    lo, hi = max(1, int(length * (1 - range_ratio))), max(1, int(length * (1 + range_ratio)))
    return rng.integers(lo, hi + 1, size=n)


def random_requests(n: int, input_len: int, output_len: int, *, rate: float = math.inf, burstiness: float = 1.0,
                    range_ratio: float = 0.0, seed: int = 0, ramp: tuple | None = None,
                    client: str = "vllm") -> Requests:
    """The random dataset of ``client``'s benchmark script (its lengths: ``random_lengths``)
    sent at ``rate`` as it sends them (see the module's notes; ``ramp``: ``arrivals``)."""
    if not 1 <= n <= MAX_REQUESTS:
        raise UserError(f"the number of prompts must be 1 to {MAX_REQUESTS:,} (got {n})")
    rng = np.random.default_rng(seed)
    inputs = random_lengths(n, input_len, range_ratio, rng, client)
    outputs = random_lengths(n, output_len, range_ratio, rng, client)
    return Requests(arrivals(n, rate, burstiness, rng, fill=rescales_gaps(client), ramp=ramp), inputs, outputs)


def _data_dir():
    from importlib.resources import files

    return files("rooflinesim.data")


def datasets() -> list[str]:
    """The traffic shapes shipped as data, by name."""
    return sorted(p.name[len("traffic-"):-len(".json")] for p in _data_dir().iterdir()
                  if p.name.startswith("traffic-") and p.name.endswith(".json"))


def load_dataset(name: str) -> dict:
    """A shipped traffic shape: its source, licence and (input, output) token pairs."""
    if name not in datasets():
        raise UserError(f"unknown dataset '{name}'; known: random, {', '.join(datasets())}")
    return json.loads((_data_dir() / f"traffic-{name}.json").read_text())


def dataset_requests(name: str, n: int, *, rate: float = math.inf, burstiness: float = 1.0,
                     seed: int = 0, ramp: tuple | None = None, client: str = "vllm") -> Requests:
    """``n`` requests of a shipped traffic shape (see the module's notes), sent at ``rate`` as
    ``client``'s benchmark script sends them (``ramp``: ``arrivals``)."""
    if not 1 <= n <= MAX_REQUESTS:
        raise UserError(f"the number of prompts must be 1 to {MAX_REQUESTS:,} (got {n})")
    data = load_dataset(name)
    rng = np.random.default_rng(seed)
    rows = len(data["input_tokens"])
    pick = rng.choice(rows, size=n, replace=n > rows)
    inputs = np.asarray(data["input_tokens"], dtype=np.int64)[pick]
    outputs = np.asarray(data["output_tokens"], dtype=np.int64)[pick]
    return Requests(arrivals(n, rate, burstiness, rng, fill=rescales_gaps(client), ramp=ramp), inputs, outputs)


def requests_at(workload: dict, rate: float) -> Requests:
    """The requests of a workload (dataset, num_prompts, burstiness, seed, for the random
    dataset input_len, output_len, range_ratio, and optionally prefix_len, num_prefixes, a
    ramp-up, ``ramp``, and the benchmark ``client`` whose semantics they follow) sent at
    ``rate``: the same lengths at any rate."""
    w = workload
    how = dict(rate=rate, burstiness=w["burstiness"], seed=w["seed"], ramp=w.get("ramp"),
               client=w.get("client", "vllm"))
    if w["dataset"] != "random":
        reqs = dataset_requests(w["dataset"], w["num_prompts"], **how)
    else:
        reqs = random_requests(w["num_prompts"], w["input_len"], w["output_len"], range_ratio=w["range_ratio"], **how)
    return reqs.with_prefixes(w.get("prefix_len", 0), w.get("num_prefixes", 1), w["seed"])


# column names a trace may use, ours first
_COLUMNS = {
    "arrival": ("arrival_s", "arrival_time_s", "arrival_time", "timestamp", "time"),
    "input": ("input_tokens", "input_len", "prompt_tokens", "contexttokens", "context_tokens", "input_length"),
    "output": ("output_tokens", "output_len", "generated_tokens", "generatedtokens", "output_length"),
}
# Mooncake's trace format (its FAST'25 traces; AIPerf's mooncake_trace, Dynamo's generator):
# timestamp in milliseconds, input_length, output_length, and hash_ids, a hash per block of
# the prompt (512 tokens in its traces): the same hash at the same place, the same prefix
# through that block. Known by its input_length column, which no other format here uses.
MOONCAKE_INPUT = "input_length"
MOONCAKE_BLOCK_TOKENS = 512
_PREFIX_COLUMNS = {"prefix id": ("prefix_id", "prefix_group"), "prefix": ("prefix_tokens", "prefix_len"),
                   "hashes": ("hash_ids",)}


def _column(header: list, what: str, name: str, columns: dict = _COLUMNS) -> str | None:
    keys = {h.strip().lower(): h for h in header}
    for c in columns[what]:
        if c in keys:
            return keys[c]
    if columns is _PREFIX_COLUMNS:
        return None
    raise UserError(f"{name}: no {what} column (one of {', '.join(_COLUMNS[what])}); it has "
                    f"{', '.join(h for h in header) or 'no columns'}")


def _seconds(value, name: str, row: int) -> float:
    """A time: seconds as a number, or an ISO date-time (the Azure traces' TIMESTAMP)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        x = float(value)
    else:
        text = str(value).strip()
        try:
            x = float(text)
        except ValueError:
            try:
                x = datetime.fromisoformat(text.replace("Z", "+00:00")[:32]).timestamp()
            except ValueError:
                raise UserError(f"{name}: row {row}: the arrival time {text[:40]!r} is neither seconds "
                                f"nor a date-time") from None
    if not math.isfinite(x):
        raise UserError(f"{name}: row {row}: the arrival time is not a finite number")
    return x


def _tokens(value, name: str, row: int, what: str) -> int:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{name}: row {row}: {what} tokens {str(value)[:40]!r} is not a number") from None
    if not (math.isfinite(x) and x == int(x) and 1 <= x <= MAX_TOKENS):
        raise UserError(f"{name}: row {row}: {what} tokens must be a whole number from 1 to "
                        f"{MAX_TOKENS:,} (got {str(value)[:40]})")
    return int(x)


def parse_trace(text: str, name: str, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> Requests:
    """A trace file's requests, sorted by arrival, times counted from the first. In Mooncake's
    format, its times are milliseconds and each request's hash_ids its nested prefixes: the
    j-th, the prompt through block j of ``block_tokens`` tokens (or its end)."""
    rows: list = []
    stripped = text.lstrip()
    if stripped.startswith("{"):
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                raise UserError(f"{name}: line {i} is not JSON") from None
            if not isinstance(rec, dict):
                raise UserError(f"{name}: line {i} is not a JSON object")
            rows.append((i, rec))
    else:
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames:
            raise UserError(f"{name}: empty trace (expected a CSV header or JSON Lines)")
        rows = [(i, rec) for i, rec in enumerate(reader, 2)]
    if not rows:
        raise UserError(f"{name}: the trace holds no requests")
    if len(rows) > MAX_REQUESTS:
        raise UserError(f"{name}: {len(rows):,} requests; at most {MAX_REQUESTS:,} are simulated")
    header = list(rows[0][1])
    cols = {w: _column(header, w, name) for w in _COLUMNS}
    pcols = {w: _column(header, w, name, _PREFIX_COLUMNS) for w in _PREFIX_COLUMNS}
    mooncake = cols["input"].strip().lower() == MOONCAKE_INPUT
    hashes = pcols["hashes"]
    if hashes is not None and pcols["prefix id"] is not None:
        raise UserError(f"{name}: give prefix_id and prefix_tokens or hash_ids, not both")
    if (pcols["prefix id"] is None) != (pcols["prefix"] is None):
        have, lack = ("prefix_id", "prefix_tokens") if pcols["prefix"] is None else ("prefix_tokens", "prefix_id")
        raise UserError(f"{name}: a {have} column needs a {lack} column beside it")
    t, inp, out, pid, ptok = [], [], [], [], []
    for i, rec in rows:
        missing = [c for c in cols.values() if rec.get(c) in (None, "")]
        if missing:
            raise UserError(f"{name}: row {i} has no {missing[0]}")
        t.append(_seconds(rec[cols["arrival"]], name, i) / (1000.0 if mooncake else 1.0))
        inp.append(_tokens(rec[cols["input"]], name, i, "input"))
        out.append(_tokens(rec[cols["output"]], name, i, "output"))
        if hashes is not None:
            pid.append(_hash_ids(rec.get(hashes), inp[-1], block_tokens, name, i))
        if pcols["prefix"] is not None:
            pid.append(_prefix(rec.get(pcols["prefix id"]), name, i))
            ptok.append(0 if pid[-1] < 0 else _tokens(rec.get(pcols["prefix"]), name, i, "prefix"))
            if ptok[-1] > inp[-1]:
                raise UserError(f"{name}: row {i}: its prefix ({ptok[-1]:,} tokens) is longer than its input "
                                f"({inp[-1]:,}), which counts it")
    t = np.array(t)
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0]
    if hashes is not None:
        prefixes = _hash_levels([pid[j] for j in order], np.array(inp)[order], block_tokens)
    else:
        prefixes = (np.array(pid, dtype=np.int64)[order], np.array(ptok, dtype=np.int64)[order]) if pid \
            else (None, None)
    return Requests(t, np.array(inp)[order], np.array(out)[order], *prefixes)


def _hash_ids(value, tokens: int, block: int, name: str, row: int) -> list:
    """A request's hash_ids (a JSON list, or its text in a CSV cell; empty: no blocks)."""
    if value in (None, ""):
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**62
                                              for x in value):
        raise UserError(f"{name}: row {row}: hash_ids must be a list of whole numbers from 0")
    if len(value) > -(-tokens // block):
        raise UserError(f"{name}: row {row}: {len(value):,} hash ids at {block:,} tokens a block cover more than its "
                        f"{tokens:,} input tokens")
    return value


def _hash_levels(hashes: list, tokens: np.ndarray, block: int):
    """Requests' hash ids as nested prefixes: level j the prompt through block j, its id the
    j-th hash (no prefix where a request has fewer blocks)."""
    levels = max((len(h) for h in hashes), default=0)
    if levels == 0:
        return None, None
    ids = np.full((len(hashes), levels), -1, dtype=np.int64)
    for r, h in enumerate(hashes):
        ids[r, :len(h)] = h
    through = np.minimum(block * np.arange(1, levels + 1)[None, :], tokens[:, None])
    return ids, np.where(ids >= 0, through, 0).astype(np.int64)


def _prefix(value, name: str, row: int) -> int:
    """A request's prefix id: a whole number from 0 (empty or -1: no shared prefix)."""
    if value in (None, ""):
        return -1
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{name}: row {row}: the prefix id {str(value)[:40]!r} is not a whole number") from None
    if not (math.isfinite(x) and x == int(x) and -1 <= x < 2**62):
        raise UserError(f"{name}: row {row}: the prefix id must be a whole number from 0, or -1 for none "
                        f"(got {str(value)[:40]})")
    return int(x)
