"""Paths in a spec: relative ones resolve against the spec file's folder, packaged files by name,
and every data/eval path is checked (`${VAR}` expanded when set, remote URLs by their form).

Why the spec's folder: `olmoablate plan specs/demo.yaml` must mean the same files whether it is
run from the checkout, from `specs/` or from a CI runner's home; the working directory is an
accident of where the user stands. A spec written for the old rule (relative to the working
directory) still works: when the spec-relative file does not exist but the cwd-relative one does,
that one is used and a warning names the spelling that works from anywhere. The plan records the
resolved absolute path, so later stages never depend on the working directory either. Paths
holding ``$`` are kept as written (expanded by the job, on the cluster, where the variable is
set); URLs are kept as written.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from olmoablate.contract import tokens as tk
from olmoablate.contract.schema import SizeSettings

Path_ = tuple[str | int, ...]

_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$")
_VAR = re.compile(r"\$\{(?P<b>[A-Za-z_][A-Za-z0-9_]*)\}|\$(?P<p>[A-Za-z_][A-Za-z0-9_]*)")
#: Remote schemes OLMo-core's data loading reads (cached_path / fsspec).
REMOTE_SCHEMES = ("s3", "gs", "gcs", "r2", "weka", "http", "https", "hf")


def _relative(value: str) -> bool:
    return not ("$" in value or "://" in value or value.startswith("~") or Path(value).is_absolute())


def resolve(value: str, base: Path) -> tuple[str, str | None]:
    """(the path as the plan records it, a warning or None); see the module docstring."""
    if not _relative(value):
        return value, None
    here = Path(os.path.normpath(base / value))
    if here.exists():
        return str(here), None
    old = Path(os.path.normpath(Path.cwd() / value))
    if old.exists() and old != here:
        better = os.path.relpath(old, base)
        return str(old), (
            f"{value} is resolved against the working directory (the old rule); relative paths "
            f"resolve against the spec's folder {base}: write {better} (found there from anywhere)"
        )
    return str(here), None


def resolve_settings(settings: SizeSettings, base: Path) -> list[tuple[Path_, str]]:
    """Rewrite the size's data/eval/tokenizer paths to what the plan records; [(path, warning)]."""
    out: list[tuple[Path_, str]] = []
    data = settings.training.data

    def one(value: str, where: Path_) -> str:
        got, why = resolve(value, base)
        if why:
            out.append((where, why))
        return got

    if tk.packaged_tokenizer(data.tokenizer) is not None:
        data.tokenizer = str(tk.packaged_tokenizer(data.tokenizer))
    elif data.tokenizer != "dolma2":
        data.tokenizer = one(data.tokenizer, ("training", "data", "tokenizer"))
    if data.paths:
        data.paths = [one(p, ("training", "data", "paths", i)) for i, p in enumerate(data.paths)]
    if data.root:
        data.root = one(data.root, ("training", "data", "root"))
    ev = settings.evaluation
    ev.lm_sets = {
        name: [one(p, ("evaluation", "lm_sets", name, i)) for i, p in enumerate(paths)]
        for name, paths in ev.lm_sets.items()
    }
    return out


@dataclass(frozen=True)
class PathCheck:
    """One checked path: a warning (with its fix) or a note saying it is not checked here."""

    where: Path_
    warning: str | None = None
    note: str | None = None


def check(value: str, where: Path_, folder: bool = False) -> PathCheck | None:
    """Check one (already resolved) path; None when it is a local file/folder that exists."""
    expanded = value
    for m in _VAR.finditer(value):
        var = m.group("b") or m.group("p")
        if var not in os.environ:
            return PathCheck(
                where,
                warning=f"{value}: not checked, ${{{var}}} is not set here (fix: export "
                f"{var}=<its folder> before validate, or --skip-paths where the data is not "
                "reachable, e.g. CI)",
            )
    if "$" in value:
        expanded = os.path.expandvars(value)
    m = _SCHEME.match(expanded)
    if m:
        scheme, rest = m.group("scheme").lower(), m.group("rest")
        bucket, _, key = rest.partition("/")
        if scheme not in REMOTE_SCHEMES:
            return PathCheck(
                where, warning=f"{expanded}: unknown URL scheme {scheme}:// (allowed: "
                f"{', '.join(s + '://' for s in REMOTE_SCHEMES)})",
            )  # fmt: skip
        if not bucket or (not key and not folder) or re.search(r"\s", rest):
            return PathCheck(
                where, warning=f"{expanded}: not a {scheme}:// URL of the form {scheme}://"
                f"<bucket>/<path>",
            )  # fmt: skip
        return PathCheck(where, note=f"{expanded} (remote: not checked here)")
    p = Path(expanded).expanduser()
    ok = p.is_dir() if folder else p.is_file()
    if ok:
        return None
    what = "folder" if folder else "file"
    shown = expanded if expanded == value else f"{value} (= {expanded})"
    return PathCheck(
        where,
        warning=f"{what} {shown} not found (fix: create it or correct the path; relative paths "
        "resolve against the spec's folder; `olmoablate data prepare` makes the demo's files)",
    )


def check_settings(settings: SizeSettings) -> list[PathCheck]:
    """Every data/eval path of one size (tokenizer files are checked by the loader itself)."""
    data = settings.training.data
    found: list[PathCheck | None] = []
    for i, p in enumerate(data.paths or []):
        found.append(check(p, ("training", "data", "paths", i)))
    if data.root:
        found.append(check(data.root, ("training", "data", "root"), folder=True))
    for name, paths in settings.evaluation.lm_sets.items():
        for i, p in enumerate(paths):
            found.append(check(p, ("evaluation", "lm_sets", name, i)))
    return [f for f in found if f is not None]
