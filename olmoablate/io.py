"""Atomic file writes, bounded JSON/YAML reads and whole tables on the console, for every stage.

Why: users interrupt commands, clusters kill jobs, and two `submit` calls can race. A reader must
only ever see the old file or the new one, never half of one, so every write goes to a temporary
file in the same directory, is fsynced, then renamed over the target (atomic on POSIX).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see either the old or the new content."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        # mkstemp creates 0600; give the file the permissions a plain open() would (umask), so
        # results stay readable by Slurm jobs and colleagues.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def file_in_the_way(folder: str | os.PathLike[str]) -> Path | None:
    """The file that stops ``folder`` from being a folder (itself or an ancestor), if any: an
    output option's one-line error names it before anything is written."""
    p = Path(folder)
    hit = next((q for q in (p, *p.parents) if q.exists()), None)
    return hit if hit is not None and not hit.is_dir() else None


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def canonical_json(obj: Any) -> str:
    """Deterministic JSON (sorted keys, no whitespace): the input of every hash we record."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def sha256_of(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes, read in 1 MiB blocks (token files are hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2) -> None:
    write_text_atomic(path, json.dumps(obj, indent=indent, sort_keys=False, default=str) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """An exclusive advisory lock (fcntl) held for the duration of the block.

    Used by the ledger so two concurrent `submit` calls serialize their read-modify-write.
    """
    lock_path = Path(path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def user_cache_path(name: str) -> Path:
    """``$XDG_CACHE_HOME/olmoablate/<name>`` (default ``~/.cache``): facts derived from files
    that `validate` would otherwise recompute at every start (a login node's fast start)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "olmoablate" / name


def _cache_entry(name: str, key: str) -> Path:
    """One small file per key (``<name>/<sha256(key)>.json``): a lookup reads only its own
    entry, however many the folder holds, and concurrent writers of different keys never meet."""
    return user_cache_path(name) / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def user_cache_get(name: str, key: str) -> Any:
    """The value stored under ``key`` in the user cache folder ``name``, or None.

    Best effort by design: a missing, unreadable or corrupt entry is a miss, never an error. Keys
    must name everything the value depends on (a file's resolved path, size and mtime, ...).
    """
    try:
        doc = json.loads(_cache_entry(name, key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc.get("value") if isinstance(doc, dict) and doc.get("key") == key else None


def user_cache_put(name: str, key: str, value: Any, *, keep: int = 64) -> None:
    """Store ``value`` (JSON) under ``key``, keeping the ``keep`` most recently stored keys of
    the folder; a read-only or full home just never caches."""
    path = _cache_entry(name, key)
    try:
        write_json_atomic(path, {"key": key, "value": value}, indent=None)
        now = time.time_ns()  # explicit: the file system's own mtime may be coarser than puts
        os.utime(path, ns=(now, now))
        entries = sorted(path.parent.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in entries[: max(0, len(entries) - keep)]:
            old.unlink(missing_ok=True)
    except OSError:
        pass  # includes an entry another process removed while we sorted


# Bounded parsing: every file a user (or a pull request) hands us is parsed with limits.

#: Largest spec file read (bytes): real specs are a few KB.
MAX_YAML_BYTES = 1 << 20
#: Largest plan.json / job-written JSON read (bytes): a plan of thousands of runs is a few MB.
MAX_JSON_BYTES = 64 << 20
#: Deepest nesting of mappings/sequences (a spec is < 10 deep).
MAX_NESTING = 64
#: Most nodes of the document once every alias is expanded (a YAML "billion laughs" is tiny
#: on disk but exponential here; everything downstream - line maps, pydantic - walks the
#: expanded tree).
MAX_EXPANDED_NODES = 100_000


class InputLimitError(ValueError):
    """A file over one of the parsing limits; ``line`` is 1-based (1 when unknown)."""

    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(message)
        self.line = line


def check_size(data: bytes | str, limit: int, what: str) -> None:
    """Refuse an input larger than ``limit`` bytes before parsing any of it."""
    if len(data) > limit:
        raise InputLimitError(f"{what} is {len(data)} bytes, over the limit of {limit} bytes")


def compose_yaml_bounded(text: str, loader_cls: type | None = None) -> tuple[Any, Any]:
    """``(node, data)`` of one YAML document, parsed with the safe loader within the limits.

    Nesting is checked on the event stream, before any node is built; the expanded size (aliases
    counted as often as they are used, a recursive alias refused) on the composed node graph,
    memoised per node so the check itself is linear in the file. ``node`` keeps positions for
    callers that map fields to lines; ``data`` is plain Python (safe tags only). ``loader_cls``:
    a safe loader subclass with extra implicit resolvers (the specs' YAML 1.2 floats).
    """
    import yaml

    check_size(text, MAX_YAML_BYTES, "the YAML file")
    loader_cls = loader_cls or getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    events = loader_cls(text)
    try:
        depth = 0
        while events.check_event():
            event = events.get_event()
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_NESTING:
                    raise InputLimitError(f"nested deeper than {MAX_NESTING} levels", _line(event))
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    finally:
        events.dispose()
    loader = loader_cls(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            try:
                _check_expanded_size(node)
            except RecursionError:
                raise InputLimitError("nested too deeply once YAML aliases are expanded") from None
        try:
            data = loader.construct_document(node) if node is not None else None
        except ValueError as err:  # int past Python's digit limit, 2024-02-30, `!!int abc`
            raise yaml.constructor.ConstructorError(
                None, None, f"unreadable value ({err})", _bad_scalar_mark(loader, node)
            ) from None
    finally:
        loader.dispose()
    return node, data


def _bad_scalar_mark(loader: Any, root: Any) -> Any:
    """Where the first scalar that cannot be constructed starts (its line for the message)."""
    import yaml

    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            loader.constructed_objects, loader.recursive_objects = {}, {}  # after the failure
            try:
                loader.construct_object(node, deep=True)
            except ValueError:
                return node.start_mark
        else:
            stack.extend(reversed(_children(node)))
    return root.start_mark


def _check_expanded_size(root: Any) -> None:
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: Any) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_:
            raise InputLimitError("recursive YAML alias (a node contains itself)", _line(node))
        open_.add(key)
        total = 1
        for child in _children(node):
            total += size(child)
            if total > MAX_EXPANDED_NODES:
                raise InputLimitError(
                    f"more than {MAX_EXPANDED_NODES} values once YAML aliases are expanded "
                    "(an alias bomb?)",
                    _line(node),
                )
        open_.discard(key)
        sizes[key] = total
        return total

    size(root)


def _children(node: Any) -> list[Any]:
    """A node's child nodes in document order (a mapping's keys and values alternating)."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _line(node: Any) -> int:
    mark = getattr(node, "start_mark", None)
    return mark.line + 1 if mark is not None else 1


def read_bytes_bounded(path: str | os.PathLike[str], limit: int = MAX_JSON_BYTES) -> bytes:
    """At most ``limit`` bytes of ``path`` (:class:`InputLimitError` beyond)."""
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    check_size(data, limit, "the JSON file")
    return data


def parse_json_bounded(data: bytes) -> Any:
    """JSON text (UTF-8) within Python's recursion limit (:class:`InputLimitError` beyond)."""
    try:
        # The C scanner guards its recursion: a hostile nesting is a RecursionError, not a crash.
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        raise InputLimitError("nested too deeply") from None


# Tables that stay whole in a terminal, a Slurm log, CI or ``| tee``. Why: rich sizes a table to
# the console, and a console that is not a terminal is 80 columns wide, so cells were cut (``to…``)
# exactly where results are read later (job logs, CI); every CLI table goes through
# :func:`print_whole`. rich is imported inside the functions: ``plan`` and ``status`` import this
# module on a login node.


def make_console(stderr: bool = False, file: IO[str] | None = None) -> Any:
    """A rich Console for our output (``file``: tests; else stdout/stderr). Text lines are not
    wrapped (a log viewer wraps them; a wrapped line breaks grep), tables go through
    :func:`print_whole`."""
    from rich.console import Console

    return Console(file=file, stderr=stderr, highlight=False, soft_wrap=True)


def is_terminal(stream: Any = None) -> bool:
    """Whether ``stream`` (default stdout) is an interactive terminal (``TERM=dumb`` is not)."""
    stream = sys.stdout if stream is None else stream
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError):
        tty = False
    return tty and os.environ.get("TERM", "") != "dumb"


def print_whole(console: Any, renderable: Any) -> None:
    """Print a table (or any renderable) at least as wide as it needs, so no cell is cut.

    In a narrow terminal the lines are then wider than the screen (the terminal wraps them),
    which keeps every value readable; cutting a run id or a loss is never acceptable.
    """
    from rich.measure import Measurement

    before = int(console.width)
    # the columns every cell needs whole (its maximum measurement, capped far beyond any table)
    options = console.options.update(max_width=100_000)
    width = max(before, int(Measurement.get(console, options, renderable).maximum))
    console.width = width  # Console.print(width=...) can only narrow, never widen
    try:
        console.print(renderable, crop=False)
    finally:
        console.width = before
