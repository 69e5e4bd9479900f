"""The run store: a results root shared by several specs, and the identities that let them share
runs (hashing: :mod:`olmoablate.plan.identity`; the lease against training one twice: run.submit).

::

    <store>/                       the results root (default results/, --results-root/--store, $OLMOABLATE_RESULTS_ROOT)
      <spec>/plan.json             its "identity" section: versions, data fingerprints, hashes, reuse
      <spec>/runs/<id>/reused.json a run trained by another spec: where its files are (launch)
      <spec>/runs/<id>/identity.json  the identity of the run trained here (launch)
      .store/leases/<hash>.json    which spec's run trains that identity (launch, under .store/lock)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from olmoablate.errors import UserError
from olmoablate.io import read_json, sha256_file, user_cache_get, user_cache_put
from olmoablate.plan import identity as ident
from olmoablate.plan.identity import PlanIdentity, short
from olmoablate.plan.layout import ResultsDir, RunDir
from olmoablate.plan.names import (
    IDENTITY_FILE,
    PLAN_FILE,
    RESULTS_ROOT,
    RESULTS_ROOT_ENV,
    REUSABLE_STATES,
    RunState,
    recorded_state,
)
from olmoablate.plan.planfile import Plan


def default_store() -> str:
    return os.environ.get(RESULTS_ROOT_ENV) or str(RESULTS_ROOT)


# Token files named by content, not path (the same file under another mount trains the same
# numbers): hashed whole up to FULL_HASH_BYTES, else by size and SAMPLES 1 MiB blocks (first and
# last included) so `plan` stays fast; a path that is not a local file is named by where it is read.

FULL_HASH_BYTES = 1 << 28
SAMPLES = 64
BLOCK = 1 << 20
_CACHE = "data-fingerprints-v2"
#: Entries the fingerprint cache keeps: a few recipes' worth of token shards (each entry is one
#: small file), so re-planning never re-reads hundreds of GB because the cache forgot them.
CACHE_ENTRIES = 4096


def where(path: str, workdir: str | Path) -> str:
    """The file the job will read for ``path``: ``$VARS`` (`plan`'s environment) and ``~``
    expanded, relative to the workdir; a URL or an unset variable stays as written."""
    expanded = os.path.expandvars(path)
    if "://" in expanded:
        return expanded
    p = Path(expanded).expanduser()
    return os.path.normpath(p if p.is_absolute() else Path(workdir) / p)


def name_of(path: str, workdir: str | Path = ".") -> str:
    """Its :func:`fingerprint`, or for a file not there (yet) ``path:`` + :func:`where`: never
    the path as written, which names another file from another folder (a missed reuse)."""
    return fingerprint(path, workdir) or f"path:{where(path, workdir)}"


def _local(path: str, workdir: Path) -> Path | None:
    p = Path(where(path, workdir))
    if "://" in str(p) or "$" in str(p):
        return None
    return p if p.is_file() else None


def fingerprint(path: str, workdir: str | Path = ".", *, fresh: bool = False) -> str | None:
    """``sha256:<hex>`` (whole file) or ``sampled-sha256:<size>:<hex>``; None if not local.
    ``fresh``: read the bytes even when the cache knows this path, size and mtime (the job's
    check: a file rewritten with its size and mtime kept would pass the cache)."""
    p = _local(path, Path(workdir))
    if p is None:
        return None
    real = p.resolve()
    st = real.stat()
    # inode and ctime too: a file rewritten in place with its size and mtime restored
    # (`touch -r`, `cp -p` over it) gets a new ctime, which no user call can set back
    key = json.dumps([str(real), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns])
    hit = None if fresh else user_cache_get(_CACHE, key)
    if isinstance(hit, str):
        return hit
    if st.st_size <= FULL_HASH_BYTES:
        out = f"sha256:{sha256_file(real)}"
    else:
        digest = hashlib.sha256()
        step = (st.st_size - BLOCK) // (SAMPLES - 1)
        with open(real, "rb") as fh:
            for i in range(SAMPLES):
                fh.seek(i * step)
                digest.update(fh.read(BLOCK))
        out = f"sampled-sha256:{st.st_size}:{digest.hexdigest()}"
    user_cache_put(_CACHE, key, out, keep=CACHE_ENTRIES)
    return out


def data_paths(run: dict[str, Any]) -> list[str]:
    """Token files, then eval files, as written."""
    out = list(run["training"]["data"].get("paths") or [])
    for files in (run.get("evaluation", {}).get("lm_sets") or {}).values():
        out.extend(files)
    return out


@dataclasses.dataclass(frozen=True)
class DataChange:
    """A data file whose content is not what the plan's identity recorded."""

    path: str  # as written in the spec
    recorded: str
    now: str

    def line(self, plan: Plan, executor: str = "local") -> str:
        """One line: what changed and the commands that train the new bytes under their own
        identity (every run reading the file that already has a folder is redone). Paths are
        shown from the plan's working directory, where `plan` was run (the 500-character
        status reason must hold both commands)."""
        res = plan.path.parent if plan.path is not None else Path("results") / plan.spec_name
        readers = [r.run_id for r in plan.runs if self.path in data_paths(r.as_json())]
        started = [r for r in readers if (res / "runs" / r / IDENTITY_FILE).is_file()]
        redo = "".join(f" --redo {r}" for r in started[:4])
        if len(started) > 4:
            redo = " --redo RUN_ID for each of its runs (`olmoablate status` lists them)"
        shown, where = _from(self.path, plan.workdir), _from(str(res), plan.workdir)
        return (
            f"{shown}: data changed since `plan` ({_shown(self.recorded)} planned, now {_shown(self.now)}); not "
            f"trained under the planned identity. Run `olmoablate plan {where} --replan`, then "
            f"`olmoablate submit {where} --executor {executor}{redo}`"
        )


def _from(path: str, workdir: str) -> str:
    """``path`` relative to ``workdir`` when under it (as the user typed it there), else as is."""
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(workdir)).as_posix()
    except ValueError:
        return path


def data_changes(plan: Plan, run_ids: list[str], *, fresh: bool) -> list[DataChange]:
    """The data files of ``run_ids`` whose fingerprint differs from plan.json's ``identity.data``
    (each file once). ``fresh`` (the job, once per start): the bytes are hashed again by the
    rule `plan` used (whole sha256 up to :data:`FULL_HASH_BYTES`, else the sampled blocks, so a
    job reads at most 256 MiB or 64 MiB per file); otherwise (`submit`) the size+mtime cache
    answers for unchanged files. A path that was not a local file at plan time is named by
    where it is read, not by content, and is not checked (nothing to compare)."""
    if plan.identity is None:
        return []
    out: list[DataChange] = []
    seen: set[str] = set()
    for rid in run_ids:
        for p in data_paths(plan.run(rid).as_json()):
            recorded = plan.identity.data.get(p)
            if p in seen or not recorded or recorded.startswith("path:"):
                continue
            seen.add(p)
            try:
                now = fingerprint(p, plan.workdir, fresh=fresh)
            except OSError:
                now = None
            # a file gone (or no longer local) is not another content: the job's own "missing
            # file ...; restore it" line is the right one (restoring it is the fix)
            if now is not None and now != recorded:
                out.append(DataChange(p, recorded, now))
    return out


def identify(
    plan: Plan, workdir: str | Path, versions: dict[str, str | None] | None = None
) -> ident.PlanIdentity:
    """The plan's ``identity`` section (no reuse yet: :func:`find_reuse`); both arms of every
    pair must have the same :func:`~olmoablate.plan.identity.pair_key`."""
    versions = dict(versions if versions is not None else ident.installed_versions())
    entries = [r.as_json() for r in plan.runs]
    data: dict[str, str | None] = {}
    for run in entries:
        for p in data_paths(run):
            if p not in data:
                data[p] = name_of(p, workdir)
    fps = {p: f for p, f in data.items() if f is not None}
    payloads = {r["run_id"]: ident.payload(r, fps, versions) for r in entries}
    for pair in plan.pairs:
        base, var = plan.run(pair.baseline_run), plan.run(pair.variant_run)
        depth = base.architecture.layers is not None or var.architecture.layers is not None
        keys = [
            ident.pair_key(payloads[r], pair.budget_match, depth)
            for r in (pair.baseline_run, pair.variant_run)
        ]
        if keys[0] != keys[1]:
            diff = ident.diff(payloads[pair.baseline_run], payloads[pair.variant_run])
            allowed = set(ident.ARCH_KEYS)
            where = [d[0] for d in diff if d[0].split(".")[0].split("[")[0] not in allowed]
            raise UserError(
                f"pair {pair.pair_id}: arms' identities differ beyond the architecture: "
                f"{', '.join(where[:8])}"
            )
    return ident.PlanIdentity(
        identity_schema=ident.IDENTITY_SCHEMA,
        versions=versions,
        data=data,
        runs={rid: ident.identity_of(p) for rid, p in payloads.items()},
    )


# Is a lent run still the identity this spec expects? Its owner may have been re-planned or its data
# rewritten since the reuse was recorded; every stage asks here.

def recorded_identity(run_dir: Path) -> str | None:
    """The identity ``run_dir`` was sent to train (its identity.json), or None."""
    try:
        doc = read_json(run_dir / IDENTITY_FILE)
    except (OSError, ValueError):
        return None
    return str(doc["identity"]) if isinstance(doc, dict) and "identity" in doc else None


def _shown(value: Any) -> str:
    """A payload value in a one-line message: hashes cut to 12 digits, the rest to 40 chars."""
    text = str(value)
    for prefix in ("sha256:", "sampled-sha256:", ""):
        rest = text[len(prefix):] if text.startswith(prefix) else None
        if rest is not None and len(rest) >= 40 and all(c in "0123456789abcdef:" for c in rest):
            return prefix + rest[-64:][:12]
    return text if len(text) <= 40 else text[:37] + "..."


def what_changed(before: dict[str, Any], after: dict[str, Any], limit: int = 3) -> str:
    """``field a -> b, ...`` of two identity payloads (the first ``limit`` differing leaves)."""
    found = ident.diff(before, after)
    parts = [f"{f} {_shown(a)} -> {_shown(b)}" for f, a, b in found[:limit]]
    more = f" and {len(found) - limit} more" if len(found) > limit else ""
    return (", ".join(parts) + more) if parts else "no field differs (identity rules changed)"


def started_as_other(results: ResultsDir, plan: Plan) -> list[tuple[str, str, str, str]]:
    """(run_id, identity its folder started as, identity ``plan`` gives it, what changed) of
    every run trained (or training) in this spec's own folder as another identity than ``plan``
    now names. Why: a plain `plan` that re-recorded those identities (changed block code, a
    token file rewritten, another torch) would leave folders of old numbers filed under new
    identities; only ``--replan`` followed by ``submit --redo`` may do that (docs/slurm.md)."""
    if plan.identity is None or not results.runs_dir.is_dir():
        return []
    try:
        old: Plan | None = Plan.load(results.plan_path)
    except UserError:
        old = None
    out = []
    for rid, new in plan.identity.runs.items():
        recorded = recorded_identity(results.own_run(rid).path)
        if recorded is None or recorded == new:
            continue
        what = "its folder was started under an earlier plan than plan.json's"
        if (
            old is not None
            and old.identity is not None
            and old.identity.runs.get(rid) == recorded
            and rid in old.runs_by_id
        ):
            before = old.identity.payload_of(old.run(rid).as_json())
            what = what_changed(before, plan.identity.payload_of(plan.run(rid).as_json()))
        out.append((rid, recorded, new, what))
    return out


def owner_problem(
    store: str | Path, where: str, identity: str, plans: dict[str, Plan | str] | None = None
) -> str | None:
    """Why the run at ``<store>/<where>`` is not a run of ``identity`` (None: it is); ``plans``
    caches spec -> its plan (or why it does not load) across calls."""
    spec, _, rid = where.partition("/runs/")
    plans = {} if plans is None else plans
    if spec not in plans:
        try:
            plans[spec] = Plan.load(ResultsDir(Path(store) / spec).plan_path)
        except UserError as err:
            plans[spec] = str(err)
    plan = plans[spec]
    if isinstance(plan, str):
        return f"its plan cannot be read ({plan})"
    theirs = plan.identity.runs.get(rid) if plan.identity is not None else None
    if theirs != identity:
        return (
            f"it is identity {short(str(theirs))} in its plan now, not {short(identity)} "
            "(`olmoablate explain` shows why)"
        )
    recorded = recorded_identity(Path(store) / where)
    if recorded is not None and recorded != identity:
        return f"it trained identity {short(recorded)} (identity.json), not {short(identity)}"
    return None


# Reuse only a run that exists (a run merely planned elsewhere may never train), and its owner,
# never a chain.


@dataclasses.dataclass(frozen=True)
class StoredRun:

    spec: str
    run_id: str
    identity: str
    state: str | None

    @property
    def where(self) -> str:  # relative to the store, as plan.json records it
        return f"{self.spec}/runs/{self.run_id}"


def spec_dirs(store: str | Path) -> list[ResultsDir]:
    """Every results folder (with a plan.json) directly under the store, by name."""
    root = Path(store)
    if not root.is_dir():
        return []
    return [ResultsDir(p) for p in sorted(root.iterdir()) if (p / PLAN_FILE).is_file()]


def stored_runs(store: str | Path, skip: str | None = None) -> dict[str, list[StoredRun]]:
    """identity -> the runs trained with it (plans that do not load or lack identities: skipped)."""
    out: dict[str, list[StoredRun]] = {}
    for rd in spec_dirs(store):
        if rd.root.name == skip:
            continue
        try:
            plan = Plan.load(rd.plan_path)
        except UserError:
            continue
        if plan.identity is None:
            continue
        for rid, h in plan.identity.runs.items():
            if rid in plan.identity.reused:
                continue
            own = RunDir(rd.runs_dir / rid, rid)
            if own.reused.exists():
                continue  # submit found it trained by another spec: that one is the run
            recorded = recorded_identity(own.path)
            if recorded is not None and recorded != h:
                continue  # trained as another identity (re-planned, or its data rewritten)
            state = recorded_state(own.status)  # None for another spec's broken file
            out.setdefault(h, []).append(StoredRun(rd.root.name, rid, h, state))
    return out


def find_reuse(store: str | Path, spec_name: str, identity: PlanIdentity) -> dict[str, StoredRun]:
    """run_id of the new plan -> the run of another spec it reuses (completed ones first)."""
    found = stored_runs(store, skip=spec_name)
    out: dict[str, StoredRun] = {}
    for rid, h in identity.runs.items():
        usable = [r for r in found.get(h, []) if r.state in REUSABLE_STATES]
        if usable:
            usable.sort(key=lambda r: (r.state != RunState.COMPLETED, r.spec, r.run_id))
            out[rid] = usable[0]
    return out


def with_reuse(identity: PlanIdentity, reuse: dict[str, StoredRun]) -> PlanIdentity:
    return identity.model_copy(update={"reused": {rid: r.where for rid, r in reuse.items()}})


def attach_identity(plan: Plan, store: str | Path, workdir: str | Path | None = None) -> Plan:
    """``plan`` with its ``identity`` section, reusing other specs' runs under ``store``."""
    ident = identify(plan, workdir if workdir is not None else plan.workdir)
    reuse = find_reuse(store, plan.spec_name, ident)
    own = ResultsDir.for_spec(plan.spec_name, store)
    # a run this spec already trains (or trained) itself stays its own when it is re-planned
    reuse = {rid: r for rid, r in reuse.items() if not own.own_run(rid).status.exists()}
    return plan.model_copy(update={"identity": with_reuse(ident, reuse)})


def gpu_hours(plan: Plan) -> tuple[float, float]:
    """(GPU-hours to train, GPU-hours saved by reused runs)."""
    reused = plan.identity.reused if plan.identity is not None else {}
    spent = sum(r.gpu_hours for r in plan.runs if r.run_id not in reused)
    saved = sum(r.gpu_hours for r in plan.runs if r.run_id in reused)
    return spent, saved


def reuse_lines(plan: Plan, store: str | Path) -> list[str]:
    if plan.identity is None:
        return []
    lines = [
        f"{rid}: reused from {Path(store) / where} (0 GPU-hours; identity "
        f"{short(plan.identity.runs[rid])})"
        for rid, where in plan.identity.reused.items()
    ]
    spent, saved = gpu_hours(plan)
    n = len(plan.identity.reused)
    reused = f", {saved:.4g} saved by {n} reused run(s)" if n else ""
    lines.append(f"GPU-hours: {spent:.4g} to train{reused}")
    return lines
