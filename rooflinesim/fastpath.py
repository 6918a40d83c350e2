"""A cold-start path for one-shot CLI predictions that needs neither pydantic nor YAML.

Specs, calibration profiles and model presets are validated by pydantic (``hardware.py``,
``calibration/profile.py``, ``models/config.py``) the first time they are read; the
validated contents are then kept as JSON in a cache directory, keyed by the size and
modification time of every spec, profile and preset file, and read back into light
attribute objects. Any change to a file, or an unwritable cache, sends the caller down the
validating path again.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from types import SimpleNamespace

from .calibration.lending import transfer, transferred_kernels
from .errors import UserError
from .gpu import SpecMethods

ENV_CACHE = "ROOFLINESIM_CACHE_DIR"
_VERSION = 7


class SpecView(SpecMethods):
    """A validated spec read back from the cache (same attributes as ``GpuSpec``)."""

    def __init__(self, data: dict):
        for k, v in data.items():
            setattr(self, k, SimpleNamespace(**v) if isinstance(v, dict) else v)


class ProfileView:
    """A validated calibration profile read back from the cache (same queries as ``Profile``)."""

    def __init__(self, data: dict, kernel_defaults: dict, collective_defaults: dict, host_defaults: tuple):
        self.gpu = data.get("gpu")
        self.kind = data.get("kind", "ideal")
        self.provenance = data.get("provenance", {})
        self.validation = data.get("validation", {})
        self._kernels = data.get("kernels", {})
        self._collectives = data.get("collectives", {})
        self._host = data.get("host", {})
        self._kd, self._cd = kernel_defaults, collective_defaults
        self._hd, self._hideal = host_defaults  # (HostParams' defaults, and the unfitted host side)
        self._seen: dict = {}
        self._done = True

    def params(self, family: str, *keys: str):
        table = self._kernels.get(family, {})
        for key in (*keys, "default"):
            if key and key in table:
                return self._view(("k", family, key), table[key], self._kd[family])
        return self._view(("k", family, ""), {}, self._kd[family])

    def find(self, family: str, *keys: str):
        table = self._kernels.get(family, {})
        key = next((k for k in keys if k in table), None)
        return None if key is None else self._view(("k", family, key), table[key], self._kd[family])

    def host_params(self, *keys: str):
        table = self._host
        for key in (*keys, "default"):
            if key in table:
                return self._view(("h", key), table[key], self._hd)
        return self._view(("h", ""), self._hideal, self._hd)

    def collective(self, kind: str):
        for key in (kind, "default"):
            if key in self._collectives:
                return self._view(("c", key), self._collectives[key], self._cd)
        return self._view(("c", ""), {}, self._cd)

    def _view(self, key, values, defaults):
        if key not in self._seen:
            self._seen[key] = _Frozen(**{**defaults, **values})
        return self._seen[key]

    def key(self) -> tuple:
        """As ``Profile.key``: a view's tables never change (its parameters are frozen)."""
        return (id(self),)

    def parts(self) -> tuple:
        return (self,)

    def __setattr__(self, name, value):
        if getattr(self, "_done", False):
            raise AttributeError("a profile is frozen; build another one to change it")
        super().__setattr__(name, value)


class _Frozen(SimpleNamespace):
    """A parameter view whose values cannot change (as the validated, frozen parameters)."""

    def __init__(self, **values):
        super().__init__(**values)
        object.__setattr__(self, "_done", True)

    def __setattr__(self, name, value):
        raise AttributeError("profile parameters are frozen; build another profile to change one")


def _cache_dir() -> Path:
    if os.environ.get(ENV_CACHE):
        return Path(os.environ[ENV_CACHE])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rooflinesim"


def _bundled_dir() -> Path:
    try:
        from importlib.resources import files

        return Path(str(files("rooflinesim.hardware_specs")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "hardware_specs"


def _inputs() -> list[Path]:
    """Every file the registry is built from: bundled and user specs, bundled profiles,
    the model presets (their config.json files and index), the memory defaults."""
    from .models import presets

    folders = [_bundled_dir(), _bundled_dir() / "profiles"]
    folders += [Path(d) for d in filter(None, os.environ.get("ROOFLINESIM_SPECS_DIR", "").split(os.pathsep))]
    found = []
    for folder in folders:
        if folder.is_dir():
            found += sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml"))
    models = Path(str(presets._folder()))
    if models.is_dir():
        found += sorted(p for p in models.iterdir() if p.suffix == ".json")
    overheads = Path(__file__).resolve().parent / "data" / "memory_overheads.yaml"
    if overheads.is_file():
        found.append(overheads)
    return found


def _signature() -> str:
    text = f"v{_VERSION}\n" + "".join(
        f"{p}|{st.st_size}|{st.st_mtime_ns}\n" for p in _inputs() for st in [p.stat()])
    return f"{zlib.crc32(text.encode()):08x}{len(text):06x}"


def _build() -> dict:
    """Validate every bundled and user spec and profile (the slow path), as plain data."""
    from .calibration.profile import (FAMILY_PARAMS, IDEAL, CollectiveParams, HostParams, bundled_profile,
                                      bundled_profiles)
    from .hardware import aliases, device_names, load_spec, spec_names
    from .memory.overheads import load_overheads
    from .models.config import _load_preset
    from .models.presets import preset_names

    specs = {n: load_spec(n).model_dump() for n in spec_names()}
    # device names that several GPUs share are left out: only memory tells those apart,
    # and the validating path says so
    lookup = {**{_key(d): c[0] for d, c in device_names().items() if len(c) == 1},
              **{_key(a): c for a, c in aliases().items()}, **{_key(n): n for n in specs}}
    profiles = {g: bundled_profile(g).model_dump() for g in bundled_profiles()}
    return {"specs": specs, "lookup": lookup, "profiles": profiles,
            "kernel_defaults": {f: params().model_dump() for f, params in FAMILY_PARAMS.items()},
            "collective_defaults": CollectiveParams().model_dump(),
            "host_defaults": [HostParams().model_dump(), IDEAL.host_params().model_dump()],
            "models": {n: _load_preset(n).model_dump() for n in preset_names()},
            "memory_defaults": load_overheads().model_dump()}


def _key(name: str) -> str:
    """The registry's name normalization (see ``hardware._key``)."""
    return "-".join(str(name).strip().lower().replace("_", " ").split())


_REGISTRY: dict | None = None


def registry() -> dict | None:
    """The cached registry, building and storing it when missing; None when a spec or
    profile cannot be validated (the caller's validating path then reports why)."""
    global _REGISTRY
    if _REGISTRY is not None:
        return _REGISTRY
    path = _cache_dir() / f"registry-{_signature()}.json"
    try:
        _REGISTRY = json.loads(path.read_text())
        return _REGISTRY
    except (OSError, ValueError):
        pass
    try:
        data = _build()
    except UserError:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)
        for old in path.parent.glob("registry-*.json"):  # registries of files since changed
            if old != path:
                old.unlink(missing_ok=True)
    except OSError:
        pass  # no cache: the next run validates again
    _REGISTRY = data
    return data


def memory_defaults() -> dict | None:
    """The validated defaults of ``data/memory_overheads.yaml`` when this process already
    holds the registry (a cold CLI call), else None: the caller reads the file itself."""
    return None if _REGISTRY is None else _REGISTRY.get("memory_defaults")


def spec(name: str):
    """A cached spec view for a registered name or alias, or None (use the full path)."""
    reg = registry()
    if reg is None:
        return None
    canonical = reg["lookup"].get(_key(name))
    return SpecView(reg["specs"][canonical]) if canonical else None


def profile(spec_view, name: str | None):
    """A cached profile view: ``None`` (the GPU's own, else transferred, else ideal),
    'ideal' or a bundled GPU name; returns None for anything else (a file path)."""
    reg = registry()
    if reg is None:
        return None
    make = lambda d: ProfileView(d, reg["kernel_defaults"], reg["collective_defaults"],  # noqa: E731
                                 tuple(reg["host_defaults"]))
    profiles = reg["profiles"]
    if name == "ideal":
        return make({})
    if name is not None:
        return make(profiles[name]) if name in profiles else None
    if spec_view.name in profiles:
        return make(profiles[spec_view.name])
    found = transfer({g: d.get("provenance") for g, d in profiles.items()}, spec_view.name,
                     spec_view.vendor)
    if not found:
        return make({})
    donor = profiles[found[0]]
    return make({**donor, **found[1], "kernels": transferred_kernels(donor["kernels"], reg["specs"][found[0]],
                                                                     spec_view)})


def model(name: str):
    """A cached view of the preset a name or Hugging Face id stands for (as
    ``models.config.load_config`` reads it), or None (a path, or no such preset: use
    the full path)."""
    from .models import presets
    from .models.facts import ModelView

    if os.path.exists(name):
        return None
    preset = presets.find_preset(name)
    reg = registry() if preset is not None else None
    if reg is None or preset not in reg.get("models", {}):
        return None
    return ModelView({**reg["models"][preset], "hf_id": presets.hf_id_for(name)})
