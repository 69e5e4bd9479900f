"""`olmoablate blocks`: the architecture blocks this installation can use, with their options.

Why a command: a block comes from olmoablate itself, from an installed package (the
``olmoablate.blocks`` entry-point group) or from a ``module:attr`` key in a spec; this lists the
first two with what a spec may set, so a user sees what ``variants:`` accepts without reading
code. Torch-free: it imports each block's torch-free half only (docs/blocks.md).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer


def blocks_command(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List the installed architecture blocks (bundled and from packages) with their options.

    A variant combines blocks by name: `variants: {x: {<block>: {<option>: value}}}`; a block in
    your own code is named `module:attr` instead. How to add one: docs/blocks.md.
    """
    from olmoablate.contract.blocks import code_identity, get_block, known_names

    rows = []
    for name in known_names():
        block = get_block(name, where="blocks")
        ident = code_identity(name)
        rows.append(
            {
                "name": name,
                "from": f"{ident['distribution']} {ident['version']}"
                if ident["distribution"]
                else ident["module"],
                "module": ident["module"],
                "summary": block.summary,
                "options": [
                    {"option": o, "type": t, "default": d} for o, t, d in block.describe()
                ],
                "excludes": dict(block.excludes),
                "decode": block.decode_supported,
            }
        )
    for r in rows:  # exclusions hold both ways: show them on both blocks
        for other in rows:
            if r["name"] in other["excludes"] and other["name"] not in r["excludes"]:
                r["excludes"][other["name"]] = other["excludes"][r["name"]]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    from olmoablate.console import make_console, print_whole

    table = Table("block", "from", "options (default)", "cannot combine with", "decode")
    for r in rows:
        opts = "\n".join(f"{o['option']}: {o['type']} = {o['default']}" for o in r["options"])
        table.add_row(
            f"{r['name']}\n{r['summary']}",
            r["from"],
            opts or "(none)",
            ", ".join(r["excludes"]) or "-",
            "yes" if r["decode"] else "no",
        )
    print_whole(make_console(), table)
