"""Run identity: one hash of everything that determines a run's numbers, and of nothing else.

The canonical run entry *minus* :data:`EXCLUDED` (each with why it cannot change a number), data
named by content (:data:`SUBSTITUTED`), plus software versions. Why a deny-list: a field added to
the run entry later is in the identity by default; forgetting to exclude one costs a missed
reuse, never a wrong verdict. Equal identities are interchangeable runs (store reuse);
:func:`pair_key` is the payload without the architecture and what it implies, equal on both arms.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from olmoablate import __version__
from olmoablate.io import sha256_of

#: Format of the payload; part of it, so a change of these rules never matches an older hash.
IDENTITY_SCHEMA = 1

#: Dotted run-entry fields left out of the identity, and why none of them changes a number.
EXCLUDED: dict[str, str] = {
    "run_id": "a name inside one spec",
    "group_id": "a name inside one spec",
    "pair_id": "a name inside one spec",
    "pairs": "which pairs of this spec use the run",
    "arm": "the arm's name in the spec; what it trains is `architecture`",
    "role": "A/A noise baseline or pair baseline: the same run either way",
    "seed": "the spec's seed index; what it sets is training.init_seed and training.data.seed",
    "size": "the size's label; what it sets is size_dims",
    "size_dims.name": "the size's label again (its dimensions are included)",
    "size_dims.preset": "whether the dimensions came from a preset or custom_sizes",
    "certificate": "the pairing hash of this spec's plan (derived)",
    "budget_match": "the rule that chose `steps`/`tokens`, which are included",
    "gpu_hours": "an estimate from assumed throughput",
    "peak_memory_gb": "an estimate",
    "optimizer_state_gb": "an estimate",
    "topology.gpu_peak_tflops": "a pricing assumption",
    "topology.assumed_mfu": "a pricing assumption",
    "training.checkpoint_interval": "checkpoints are exact; resuming does not change the numbers",
    "training.wandb": "where metrics are mirrored",
    "slurm.partition": "where the job is queued",
    "slurm.account": "who pays",
    "slurm.qos": "queue priority",
    "slurm.exclusive": "node sharing",
    "slurm.cpus_per_task": "host resources (threads are training.threads)",
    "slurm.mem_gb": "host memory",
    "slurm.max_num_timeout": "how often a job may be requeued",
    "slurm.signal_delay_s": "when the checkpoint warning arrives",
    "slurm.time_min": "the job's time limit (runs resume exactly)",
    "slurm.extra": "scheduler options",
}

#: Fields named by what they hold instead of where they are (paths of one machine).
SUBSTITUTED: dict[str, str] = {
    "training.data.paths": "each token file's fingerprint (not there yet: where it is read), in order",
    "training.data.root": "dropped: a mix is named by `mix` and the OLMo-core version",
    "training.data.tokenizer": "the tokenizer file's sha256 when it is a file",
    "evaluation.lm_sets": "each eval file's content fingerprint (or where it is read), by set name",
}

#: Payload keys that differ between the two arms of a pair by design (the architecture and the
#: counts derived from it); the budget keys too when the pair is FLOPs-matched.
ARCH_KEYS = (
    "architecture",
    "code",  # the blocks' code identity: part of the intervention, absent on a baseline
    "params",
    "non_embedding_params",
    "unique_params",
    "train_flops_per_token",
    "final_train_flops_per_token",
    "total_train_flops",
    "loop_counts",
)
#: Keys that may differ inside a pair when the variant's budget is matched on FLOPs (dotted).
BUDGET_KEYS = ("tokens", "steps", "training.tokens", "training.steps")

#: Software whose version is part of every identity (distribution names).
VERSIONED = ("olmoablate", "ai2-olmo-core", "torch", "ai2-olmo-eval")
#: Versions that count only for runs that use them: ai2-olmo-eval defines the downstream tasks;
#: a run scoring none does not depend on it (or on the extra being installed).
ONLY_WHEN = {"ai2-olmo-eval": "evaluation.downstream"}


def installed_versions() -> dict[str, str | None]:
    """The installed versions of :data:`VERSIONED` (None: not installed), without importing."""
    out: dict[str, str | None] = {"olmoablate": __version__}  # this checkout's, not the install's
    for dist in VERSIONED[1:]:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def version_mismatch(
    run: Mapping[str, Any], recorded: Mapping[str, Any], installed: Mapping[str, Any]
) -> list[tuple[str, Any, Any]]:
    """(distribution, version in the identity, installed) of each version that counts for ``run``
    and differs: a job training with these would file its numbers under the wrong identity."""
    counts = [d for d in VERSIONED if d not in ONLY_WHEN or _used(run, ONLY_WHEN[d])]
    return [
        (d, recorded.get(d), installed.get(d))
        for d in counts
        if d in recorded and recorded.get(d) != installed.get(d)
    ]


def _at(node: Any, keys: list[str]) -> Any:
    """The value at ``keys`` under ``node`` (None where a step is not a mapping or missing)."""
    for key in keys:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _pop(doc: dict[str, Any], dotted: str) -> None:
    *head, last = dotted.split(".")
    node = _at(doc, head)
    if isinstance(node, dict):
        node.pop(last, None)


def payload(
    run: Mapping[str, Any], fingerprints: Mapping[str, str], versions: Mapping[str, Any]
) -> dict[str, Any]:
    """What the identity hashes: the run entry without :data:`EXCLUDED`, its paths replaced by
    ``fingerprints`` (`olmoablate.plan.store.name_of`), and the versions."""
    doc = copy.deepcopy(dict(run))
    for dotted in EXCLUDED:
        _pop(doc, dotted)
    data = doc.get("training", {}).get("data")
    if isinstance(data, dict):
        paths = data.pop("paths", None)
        if paths is not None:
            data["files"] = [fingerprints.get(p, f"path:{p}") for p in paths]
        data.pop("root", None)
        if data.get("tokenizer_sha256"):
            data.pop("tokenizer", None)
    ev = doc.get("evaluation")
    if isinstance(ev, dict) and isinstance(ev.get("lm_sets"), dict):
        ev["lm_sets"] = {
            name: [fingerprints.get(p, f"path:{p}") for p in files]
            for name, files in ev["lm_sets"].items()
        }
    doc["identity_schema"] = IDENTITY_SCHEMA
    doc["versions"] = {
        dist: v for dist, v in versions.items() if dist not in ONLY_WHEN or _used(run, ONLY_WHEN[dist])
    }
    return doc


def _used(run: Mapping[str, Any], dotted: str) -> bool:
    return bool(_at(run, dotted.split(".")))


def identity_of(payload_doc: Mapping[str, Any]) -> str:
    return sha256_of(payload_doc)


def pair_key(
    payload_doc: Mapping[str, Any], budget_match: str = "tokens", depth_declared: bool = False
) -> str:
    """The payload's hash without the architecture (and, FLOPs-matched, the budget), equal on both
    arms of a valid pair; ``depth_declared`` (a ``layers:`` arm) leaves out size_dims.n_layers."""
    doc = copy.deepcopy(dict(payload_doc))
    for key in ARCH_KEYS:
        doc.pop(key, None)
    if budget_match == "flops":
        for dotted in BUDGET_KEYS:
            _pop(doc, dotted)
    if depth_declared:
        _pop(doc, "size_dims.n_layers")
    return sha256_of(doc)


def is_run_place(where: str) -> bool:
    """``<spec>/runs/<run_id>``, relative to the store (``reused`` and reused.json); nothing else
    is followed: an absolute path or ``..`` would read files outside the store."""
    parts = where.split("/")
    return (
        len(parts) == 3
        and parts[1] == "runs"
        and all(p not in ("", ".", "..") and "\\" not in p for p in (parts[0], parts[2]))
    )


def short(identity: str) -> str:
    """The first 12 hex digits (what tables show; the files hold the whole hash)."""
    return identity[:12]


def diff(a: Any, b: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted path, value in a, value in b) of every differing leaf (same-length lists by item)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out: list[tuple[str, Any, Any]] = []
        for key in sorted(set(a) | set(b), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            out.extend(diff(a.get(key, "<absent>"), b.get(key, "<absent>"), path))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and a != b:
        pairs = enumerate(zip(a, b, strict=True))
        return [d for i, (x, y) in pairs for d in diff(x, y, f"{prefix}[{i}]")]
    return [] if a == b else [(prefix or "<payload>", a, b)]


class PlanIdentity(BaseModel):
    """plan.json's ``identity`` section (absent in older plans: their runs are never shared)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    identity_schema: int
    #: Distribution name -> version at plan time (None: not installed there).
    versions: dict[str, str | None]
    #: Every data path as written -> its content fingerprint, or ``path:`` + the file the job
    #: reads when it is not there at plan time (None in older plans: the path was hashed).
    data: dict[str, str | None]
    #: run_id -> identity (sha256 of :func:`payload`).
    runs: dict[str, str]
    #: run_id -> ``<spec>/runs/<run_id>`` under the store: a run of another spec with the same
    #: identity, which this spec uses instead of training its own (priced at 0 GPU-hours).
    reused: dict[str, str] = {}

    @field_validator("reused")
    @classmethod
    def _places(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [w for w in v.values() if not is_run_place(w)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a run of the store (allowed: <spec>/runs/<id>)")
        return v

    def payload_of(self, run: Mapping[str, Any]) -> dict[str, Any]:
        fps = {p: f for p, f in self.data.items() if f is not None}
        return payload(run, fps, self.versions)


# The pairing certificate: a hash of everything the two arms of a pair must share. `plan` computes
# it, the job refuses an entry that no longer matches, `report` excludes a pair whose arms disagree;
# whatever ``ARM_KEYS`` does not name is covered, so a new setting is never forgotten.

#: Run-entry keys that name the arm, or are derived from its architecture or its placement:
#: everything else in a run entry is covered by the certificate.
ARM_KEYS: frozenset[str] = frozenset(ARCH_KEYS) | {
    "run_id",
    "pair_id",
    "pairs",
    "arm",
    "role",  # "aa": an A/A baseline of the gate's noise measurement (no pair)
    "certificate",
    "budget_match",
    "gpu_hours",
    "peak_memory_gb",
    "optimizer_state_gb",
}


def shared_settings(run: Mapping[str, Any], budget_match: str | None = None) -> dict[str, Any]:
    """The part of a run entry that both arms of its pair must have identical. ``budget_match``:
    the pair's budget rule (default: the run's own); ``"flops"`` leaves out the budget keys."""
    # Shallow copies only: hashing never mutates, and the budget keys are dropped from fresh
    # dicts along their path (the run entry itself is left untouched).
    shared = {k: v for k, v in run.items() if k not in ARM_KEYS}
    if (budget_match or run.get("budget_match")) == "flops":
        for dotted in BUDGET_KEYS:
            path = dotted.split(".")
            node: Any = shared
            for key in path[:-1]:
                child = node.get(key)
                if not isinstance(child, dict):
                    node = None
                    break
                node[key] = dict(child)
                node = node[key]
            if isinstance(node, dict):
                node.pop(path[-1], None)
    return shared


def certificate_of(run: Mapping[str, Any], budget_match: str | None = None) -> str:
    """sha256 of the run's shared settings (canonical JSON) under the pair's budget rule."""
    return sha256_of(shared_settings(run, budget_match))


def differences(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths whose values differ between two mappings (for error messages and reports)."""
    out: list[str] = []
    for key in sorted(set(a) | set(b)):
        path = f"{prefix}.{key}" if prefix else str(key)
        va, vb = a.get(key, "<missing>"), b.get(key, "<missing>")
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            out.extend(differences(va, vb, path))
        elif va != vb:
            out.append(path)
    return out
