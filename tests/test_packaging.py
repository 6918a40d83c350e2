"""pyproject.toml declares every folder of the package and every data file in it, so that
a wheel holds what a source checkout has (and setuptools has nothing to warn about)."""

from fnmatch import fnmatch
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def _folders():
    """Package name -> its folder in the checkout, from package-dir."""
    dirs = SETUPTOOLS["package-dir"]
    out = {}
    for top, folder in dirs.items():
        base = ROOT / folder
        for d in [base, *sorted(p for p in base.rglob("*") if p.is_dir())]:
            if d.name == "__pycache__" or not any(f.is_file() for f in d.iterdir()):
                continue
            out[".".join([top, *d.relative_to(base).parts])] = d
    return out


def test_every_folder_is_a_listed_package():
    missing = sorted(set(_folders()) - set(SETUPTOOLS["packages"]))
    assert not missing, f"add to [tool.setuptools] packages: {missing}"


def test_every_data_file_is_declared():
    globs = PYPROJECT["tool"]["setuptools"]["package-data"]
    left_out = []
    for name, folder in _folders().items():
        for f in folder.iterdir():
            if f.is_file() and f.suffix not in (".py", ".pyc"):
                if not any(fnmatch(f.name, g) for g in globs.get(name, [])):
                    left_out.append(str(f.relative_to(ROOT)))
    assert not left_out, f"add to [tool.setuptools.package-data]: {left_out}"
    assert any(fnmatch("attention_kernels.json", g) for g in globs["rooflinesim.data"])


def test_license_is_an_spdx_string():
    # (a table is deprecated; the string form needs setuptools 77)
    assert isinstance(PYPROJECT["project"]["license"], str)
    assert any(r.replace(" ", "").startswith("setuptools>=77") for r in PYPROJECT["build-system"]["requires"])
