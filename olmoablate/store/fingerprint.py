"""Token files named by what they hold: a content fingerprint, cached per (path, size, mtime).

Why not the path: the same file under another mount, a symlink or a copy trains the very same
numbers, and a path of one machine must never make two identical runs look different (Marin's
users hit exactly that with region bucket paths). Why not always the whole file's sha256: a 1B
run's token files are hundreds of GB, and `plan` must stay a login-node command. Files up to
:data:`FULL_HASH_BYTES` are hashed whole; larger ones by their size and :data:`SAMPLES` blocks of
1 MiB spread evenly over the file (the first and the last included), and say so in the prefix.
A path that is not a local file (a URL, a file made later on the cluster) has no fingerprint:
it is named by where the job will read it (``$VAR`` expanded, relative to the plan's workdir:
:func:`name_of`), so it never matches different data by accident.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from olmoablate.io import sha256_file, user_cache_get, user_cache_put

FULL_HASH_BYTES = 1 << 28
SAMPLES = 64
BLOCK = 1 << 20
_CACHE = "data-fingerprints-v1"
#: Entries the fingerprint cache keeps: a few recipes' worth of token shards (each entry is one
#: small file), so re-planning never re-reads hundreds of GB because the cache forgot them.
CACHE_ENTRIES = 4096


def where(path: str, workdir: str | Path) -> str:
    """The file the job will read for ``path`` as written: environment variables expanded (as
    the job does; here with `plan`'s environment), ``~`` expanded, relative to the plan's
    workdir. A URL stays as written; a variable that is not set stays unexpanded (and a path
    relative with it is still anchored at the workdir)."""
    expanded = os.path.expandvars(path)
    if "://" in expanded:
        return expanded
    p = Path(expanded).expanduser()
    return os.path.normpath(p if p.is_absolute() else Path(workdir) / p)


def name_of(path: str, workdir: str | Path = ".") -> str:
    """What the identity calls a data path: its :func:`fingerprint`, or, for a file that is not
    there (yet), ``path:`` and :func:`where` the job will read it: never the path as written,
    which names another file from another folder or with another ``$VAR`` (a missed reuse,
    never a wrong one)."""
    return fingerprint(path, workdir) or f"path:{where(path, workdir)}"


def _local(path: str, workdir: Path) -> Path | None:
    p = Path(where(path, workdir))
    if "://" in str(p) or "$" in str(p):
        return None
    return p if p.is_file() else None


def fingerprint(path: str, workdir: str | Path = ".") -> str | None:
    """``sha256:<hex>`` (whole file) or ``sampled-sha256:<size>:<hex>``; None if not local."""
    p = _local(path, Path(workdir))
    if p is None:
        return None
    real = p.resolve()
    st = real.stat()
    key = json.dumps([str(real), st.st_size, st.st_mtime_ns])
    hit = user_cache_get(_CACHE, key)
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
