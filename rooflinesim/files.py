"""Reading a user's files and writing ours, each problem one sentence (a UserError).

Every input file goes through ``read_text``: a regular file, at most a stated size,
UTF-8 text. Every output goes through ``output_path`` (checked before any work is done,
so that a wrong path fails at once) and ``write_text`` / ``write_bytes`` (a temporary
file beside the target, then a rename: a failed write leaves what was there).
``load_yaml`` parses YAML with a safe loader and a bound on what aliases expand to.
Standard library only (YAML is imported where it is parsed), so the harness uses it too.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from .errors import UserError

__all__ = ["KiB", "MiB", "SMALL_FILE_BYTES", "shorten", "field_path", "size_text", "read_text", "load_yaml",
           "load_json", "output_path", "write_text", "write_bytes"]

KiB = 1024
MiB = 1024 * KiB
# Specs, profiles, overheads and config.json files are a few kilobytes; a megabyte is
# far beyond any real one and small enough to read and parse at once.
SMALL_FILE_BYTES = 1 * MiB
# A YAML file may use anchors and aliases, but what they expand to stays small: a spec
# has about a hundred values ("billion laughs" expands a kilobyte to gigabytes).
YAML_MAX_NODES = 100_000


def shorten(value, limit: int = 40) -> str:
    """``repr(value)`` cut to about ``limit`` characters, for quoting in a message.

    Containers are cut before they are printed in full (a shared YAML structure can be
    enormous when expanded)."""
    if isinstance(value, (list, tuple, dict, set)):
        text = _cut_repr(value, limit + 1)
    else:
        text = repr(value) if not isinstance(value, str) else repr(value[: limit + 1])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def field_path(loc) -> str:
    """Where a problem is, as 'memory.capacity': a key that is not a plain printable name
    (empty, with spaces or control characters, very long) is quoted, cut short."""
    parts = []
    for part in loc:
        text = str(part)
        plain = 0 < len(text) <= 40 and text.isprintable() and " " not in text
        parts.append(text if plain else shorten(text, 30))
    return ".".join(parts)


def _cut_repr(value, limit: int) -> str:
    """A repr of a container that stops once ``limit`` characters are written."""
    parts: list[str] = []
    size = 0

    def add(s: str) -> bool:
        nonlocal size
        parts.append(s)
        size += len(s)
        return size < limit

    def walk(v, depth: int) -> bool:
        if depth > 20:
            return add("...")
        if isinstance(v, dict):
            if not add("{"):
                return False
            for i, (k, x) in enumerate(v.items()):
                if (i and not add(", ")) or not walk(k, depth + 1) or not add(": ") \
                        or not walk(x, depth + 1):
                    return False
            return add("}")
        if isinstance(v, (list, tuple, set)):
            if not add("["):
                return False
            for i, x in enumerate(v):
                if (i and not add(", ")) or not walk(x, depth + 1):
                    return False
            return add("]")
        return add(repr(v[:limit] if isinstance(v, str) else v))

    walk(value, 0)
    return "".join(parts)


def size_text(n: float) -> str:
    """A byte count for a message: '1 MiB', '532 KiB', '12 bytes'."""
    for unit, factor in (("GiB", 1024 * MiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= factor:
            return f"{n / factor:.3g} {unit}"
    return f"{int(n)} bytes"


def read_text(path, what: str, max_bytes: int = SMALL_FILE_BYTES) -> str:
    """The UTF-8 text of the regular file ``path``, at most ``max_bytes`` long.

    ``what`` names the file in messages ("spec", "measurement"); a missing file, a
    directory, a device or pipe, a file too large, one that is not UTF-8 (binary,
    UTF-16, Latin-1) is one sentence. A UTF-8 byte-order mark is dropped."""
    text = os.fspath(path)
    if not str(text).strip():
        raise UserError(f"an empty path was given for the {what} file")
    try:
        st = os.stat(text)
    except FileNotFoundError:
        raise UserError(f"{text}: no such {what} file") from None
    except OSError as exc:
        raise UserError(f"{text}: cannot read the {what} file ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"{text} is a directory, not a {what} file")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{text} is not a regular file, and a {what} file must be one")
    if st.st_size > max_bytes:
        raise UserError(f"{text} holds {size_text(st.st_size)}, more than the "
                        f"{size_text(max_bytes)} a {what} file may hold")
    try:
        with open(text, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise UserError(f"{text}: cannot read the {what} file ({exc.strerror or exc})") from None
    if len(data) > max_bytes:  # it grew since stat
        raise UserError(f"{text} holds more than the {size_text(max_bytes)} a {what} file may hold")
    return decode(data, text, what)


def decode(data: bytes, source: str, what: str) -> str:
    """``data`` as UTF-8 text, or one sentence saying where it is not."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        kind = ("UTF-16 text" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else
                "binary data" if b"\x00" in data[:4096] else "text in another encoding")
        raise UserError(f"{source}: the {what} file is not UTF-8 text (byte 0x{data[exc.start]:02x} "
                        f"on line {line}; it looks like {kind})") from None


def load_json(text: str, source: str):
    """``json.loads`` with its problems (syntax, nesting too deep) as one sentence."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{source}: not valid JSON at line {exc.lineno}, column {exc.colno} "
                        f"({exc.msg})") from None
    except RecursionError:
        raise UserError(f"{source}: the JSON is nested too deeply") from None


def load_yaml(text: str, source: str):
    """Plain data from YAML text (a safe loader: no Python objects), refusing aliases
    that expand to more than YAML_MAX_NODES values or that refer to themselves."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, source)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise UserError(f"{source}: not valid YAML{where} ({shorten(problem, 60)[1:-1]})") from None
    except RecursionError:
        raise UserError(f"{source}: the YAML is nested too deeply") from None
    except UserError:
        raise
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. an unhashable mapping key
        raise UserError(f"{source}: not valid YAML ({shorten(str(exc), 60)[1:-1]})") from None
    finally:
        loader.dispose()


def _check_expansion(root, source: str) -> None:
    """Count the values the node graph stands for once aliases are expanded."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_:
            raise UserError(f"{source}: a YAML alias refers to a value that contains it")
        open_.add(key)
        n = 1
        value = node.value
        if isinstance(value, list):
            for item in value:
                for child in (item if isinstance(item, tuple) else (item,)):
                    n += size(child)
                    if n > YAML_MAX_NODES:
                        raise UserError(f"{source}: YAML aliases expand to more than "
                                        f"{YAML_MAX_NODES:,} values; write the values out")
        open_.discard(key)
        sizes[key] = n
        return n

    size(root)


def is_file(path) -> bool:
    """Whether ``path`` is a regular file; a name the system will not look up (too long, say)
    is none, not an error."""
    try:
        return Path(path).is_file()
    except OSError:
        return False


def exists(path) -> bool:
    """Whether ``path`` exists; a name the system will not look up is not there."""
    try:
        return Path(path).exists()
    except OSError:
        return False


def output_path(path, what: str, force: bool = False, flag: str = "--force") -> Path:
    """``path`` checked as a place to write the ``what`` file before any work is done:
    not empty, not a directory, in a directory that exists and can be written, and not
    an existing file unless ``force``."""
    text = os.fspath(path)
    if not str(text).strip():
        raise UserError(f"an empty path was given for the {what} file")
    try:
        return _output_path(Path(text), what, force, flag)
    except OSError as exc:  # (a name the system will not take: too long, say)
        raise UserError(f"cannot write the {what} file {shorten(text)}: {exc.strerror or exc}") from None


def _output_path(p: Path, what: str, force: bool, flag: str) -> Path:
    if p.is_dir():
        raise UserError(f"{p} is a directory; give a file name for the {what} file")
    parent = p.absolute().parent
    if not parent.exists():
        raise UserError(f"cannot write {p}: the directory {parent} does not exist")
    if not parent.is_dir():
        raise UserError(f"cannot write {p}: {parent} is not a directory")
    if p.exists() or p.is_symlink():
        if not force:
            raise UserError(f"{p} exists; pass {flag} to overwrite it")
        if not p.is_file():
            raise UserError(f"{p} is not a regular file, and it will not be overwritten")
        if not os.access(p, os.W_OK):
            raise UserError(f"cannot write {p}: permission denied")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"cannot write {p}: permission denied in {parent}")
    return p


def write_bytes(path, data: bytes, what: str = "output") -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise UserError(f"cannot write the {what} file {p} ({exc.strerror or exc})") from None


def write_text(path, text: str, what: str = "output") -> None:
    write_bytes(path, text.encode("utf-8"), what)
