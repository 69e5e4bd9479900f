"""`olmoablate data prepare|check`: build and verify the offline demo token files.

Imported by the CLI at start-up, so only light modules at top level; numpy and tokenizers are
imported inside `prepare` when it actually tokenizes.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from olmoablate.data.corpus import SOURCES
from olmoablate.data.prepare import (
    DEFAULT_DIR,
    DEFAULT_HELDOUT_EVERY,
    DEFAULT_SOURCE,
    describe,
    prepare,
    verify,
)

data_app = typer.Typer(
    help="Prepare the offline demo data (dolma2 tokenizer + real English text).",
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
) -> None:
    """Tokenize the corpus with dolma2 into OLMo-core uint32 token files (idempotent)."""
    started = time.perf_counter()
    result = prepare(
        out,
        source=source,
        source_dir=source_dir,
        max_tokens=max_tokens,
        heldout_every=heldout_every,
        force=force,
    )
    m = result.manifest
    verb = "kept" if result.skipped else "wrote"
    typer.echo(
        f"{verb} {m.dir} ({result.reason}); source {m.source}: {m.file_count} files "
        f"from {m.source_dir}, {time.perf_counter() - started:.1f}s"
    )
    typer.echo(describe(m))


@data_app.command("check")
def check_command(
    dir: Path = typer.Option(DEFAULT_DIR, "--dir", help="Folder written by `data prepare`."),
) -> None:
    """Verify the manifest and the sha256 of every token file (exit 2 with the fix otherwise)."""
    m = verify(dir)
    typer.echo(f"ok: {m.dir} ({m.source}, dtype {m.dtype}, eos {m.eos_token_id})")
    typer.echo(describe(m))
