"""Bundled model presets: real Hugging Face config.json files and the names they answer to.

``presets/index.json`` maps each preset to its file, the Hugging Face ids it stands for
(base and -Instruct variants whose architecture is the same) and short aliases, with the
public copy each file was taken from. Names compare case-insensitively.
"""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import UnknownName, did_you_mean

__all__ = [
    "preset_names", "preset_ids", "preset_path", "preset_entry", "find_preset", "hf_id_for", "unknown",
]

PACKAGE = "rooflinesim.models"
FOLDER = "presets"
INDEX = "index.json"


def _key(name: str) -> str:
    """Lookup key: case-insensitive, surrounding space and underscores-vs-hyphens forgiven."""
    return str(name).strip().lower().replace("_", "-")


@lru_cache(maxsize=1)
def _folder():
    """The presets folder: through importlib.resources when installed, else beside this file."""
    try:
        from importlib.resources import files

        folder = files(PACKAGE) / FOLDER
        if folder.is_dir():
            return folder
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - unusual installs only
        pass
    return Path(__file__).resolve().parent / FOLDER


@lru_cache(maxsize=1)
def _index() -> dict[str, dict[str, Any]]:
    return json.loads(_folder().joinpath(INDEX).read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _lookup() -> tuple[dict[str, str], dict[str, str]]:
    """(lookup key -> preset name, lookup key -> the id as the index spells it)."""
    names: dict[str, str] = {}
    spelled: dict[str, str] = {}
    for preset, entry in _index().items():
        for alias in (preset, *entry.get("hf_ids", ()), *entry.get("aliases", ())):
            key = _key(alias)
            if names.get(key, preset) != preset:
                raise ValueError(f"presets index: '{alias}' names both {names[key]} and {preset}")
            names[key] = preset
            spelled.setdefault(key, alias)
    return names, spelled


def preset_names() -> list[str]:
    """Canonical preset names, sorted."""
    return sorted(_index())


def preset_ids() -> dict[str, str]:
    """Every accepted name (lower case: canonical names, Hugging Face ids, aliases) -> preset."""
    return dict(sorted(_lookup()[0].items()))


def find_preset(name: str) -> str | None:
    """The preset a name or Hugging Face id stands for, or None."""
    return _lookup()[0].get(_key(name))


def _resolve(name: str) -> str:
    preset = find_preset(name)
    if preset is None:
        raise unknown(name)
    return preset


def unknown(name: str) -> UnknownName:
    """The one-sentence error for a name that is neither a preset nor a file: the closest
    accepted names, or the canonical preset names when none is close."""
    key, accepted = _key(name), list(_lookup()[0])
    if difflib.get_close_matches(key, accepted, n=1, cutoff=0.5):
        return did_you_mean(key, accepted, "model")
    return did_you_mean(key, preset_names(), "model")


def preset_entry(name: str) -> dict[str, Any]:
    """The index entry of a preset (file, hf_ids, aliases, copied_from, source, note)."""
    return dict(_index()[_resolve(name)])


def preset_path(name: str):
    """The config.json file of a preset (a pathlib.Path for an ordinary install)."""
    return _folder().joinpath(_index()[_resolve(name)]["file"])


def hf_id_for(name: str) -> str | None:
    """The Hugging Face id ``name`` spells (as the index writes it), else the preset's first id."""
    preset = _resolve(name)
    key = _key(name)
    ids = _index()[preset].get("hf_ids", [])
    if any(_key(i) == key for i in ids):
        return _lookup()[1][key]
    return ids[0] if ids else None
