"""`olmoablate data prepare|check`: build and verify the offline demo token files.

Imported by the CLI at start-up, so only light modules at top level: the preparing and checking
code (and through it numpy and tokenizers) is imported inside the commands.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from olmoablate.data.corpus import DEFAULT_DIR, DEFAULT_HELDOUT_EVERY, DEFAULT_SOURCE, SOURCES
from olmoablate.data.vocab import VOCABS
from olmoablate.errors import UserError

data_app = typer.Typer(
    help="Prepare the offline demo data (dolma2 or the demo BPE + real English text).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@data_app.command("prepare")
def prepare_command(
    out: Path = typer.Option(
        DEFAULT_DIR, "--out", help="Output folder for train.bin, heldout.bin, manifest.json."
    ),
    source: str = typer.Option(
        DEFAULT_SOURCE, "--source", help=f"Corpus source ({', '.join(sorted(SOURCES))})."
    ),
    source_dir: Path | None = typer.Option(
        None,
        "--source-dir",
        help="Read the source's files from this folder instead of the default.",
    ),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", help="Cap the train split at N tokens (whole documents)."
    ),
    heldout_every: int = typer.Option(
        DEFAULT_HELDOUT_EVERY, "--heldout-every", help="Hold out every N-th document for eval."
    ),
    force: bool = typer.Option(
        False, "--force", help="Rebuild even when the folder is up to date."
    ),
    tokenizer: str = typer.Option(
        "all",
        "--tokenizer",
        help="dolma2 (uint32 files in OUT), bpe4096 (the shipped 4,096-entry BPE, uint16 files "
        "in OUT/bpe4096), or all (both; the default).",
    ),
) -> None:
    """Tokenize the corpus into OLMo-core token files: dolma2 and the demo's BPE (idempotent)."""
    from olmoablate.data.prepare import describe, prepare

    allowed = ["all", *VOCABS]
    if tokenizer not in allowed:
        raise UserError(f"--tokenizer: unknown {tokenizer!r} (allowed: {', '.join(allowed)})")
    for name in VOCABS if tokenizer == "all" else [tokenizer]:
        vocab = VOCABS[name]
        started = time.perf_counter()
        result = prepare(
            out / vocab.subdir if vocab.subdir else out,
            source=source,
            source_dir=source_dir,
            max_tokens=max_tokens,
            heldout_every=heldout_every,
            force=force,
            tokenizer=name,
        )
        m = result.manifest
        verb = "kept" if result.skipped else "wrote"
        typer.echo(
            f"{verb} {m.dir} ({vocab.name}, {m.dtype}; {result.reason}); source {m.source}: "
            f"{m.file_count} files from {m.source_dir}, {time.perf_counter() - started:.1f}s"
        )
        typer.echo(describe(m))


@data_app.command("check")
def check_command(
    dir: Path = typer.Option(DEFAULT_DIR, "--dir", help="Folder written by `data prepare`."),
) -> None:
    """Verify manifest, sha256, dtype and largest id of every token file (exit 2 otherwise).

    Checks DIR and, when present, DIR/bpe4096 (the demo's BPE token files).
    """
    from olmoablate.contract.tokens import scan_token_file
    from olmoablate.data.manifest import describe, verify

    dirs = [dir] + [dir / v.subdir for v in VOCABS.values() if v.subdir and (dir / v.subdir).is_dir()]
    for d in dirs:
        m = verify(d)
        for split in ("train", "heldout"):
            scan = scan_token_file(m.path_of(split), m.dtype, m.eos_token_id, 2, m.vocab_size)
            if scan.max_id >= m.vocab_size:
                raise UserError(
                    f"{m.path_of(split)}: largest token id {scan.max_id} >= vocab size "
                    f"{m.vocab_size} of {m.tokenizer_name} (read as {m.dtype})"
                )
        entropy = m.stats.get("heldout_unigram_entropy_nats")
        typer.echo(
            f"ok: {m.dir} ({m.source}, {m.tokenizer_name}, dtype {m.dtype}, eos {m.eos_token_id}"
            f", held-out unigram entropy {entropy} nats/token)"
        )
        typer.echo(describe(m))
