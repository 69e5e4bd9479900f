"""The report's Jinja2 environment: templates under ``templates/`` (package data), one per
format, and the filters they share.

Why templates: the markdown, HTML and terminal outputs are three views of one
:class:`~olmoablate.report.render.document.Document`; a template shows a format's layout at a
glance and keeps markup out of the code that decides what is said. HTML autoescapes every value;
markdown and the terminal do not (their values are plain text, escaped by their own filters).
"""

from __future__ import annotations

import base64
import functools
from pathlib import Path
from typing import Any

from olmoablate.report.render.document import fmt

VERDICT_COLOR = {"proceed": "#1a7f37", "stop": "#cf222e", "inconclusive": "#9a6700"}
VERDICT_STYLE = {"proceed": "bold green", "stop": "bold red", "inconclusive": "bold yellow"}


def _md_cell(v: Any) -> str:
    return fmt(v).replace("|", "\\|").replace("\n", " ")


def _b64(path: Path) -> str:
    return base64.b64encode(Path(path).read_bytes()).decode("ascii")


def _rich(text: Any) -> str:
    from rich.markup import escape

    return escape(str(text))


@functools.cache
def environment(kind: str) -> Any:
    """The environment for ``kind`` ("html" autoescapes; "md" and "text" do not)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("olmoablate.report.render", "templates"),
        autoescape=kind == "html",
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        fmt=fmt,
        md_cell=_md_cell,
        b64=_b64,
        rich=_rich,
        color=lambda v: VERDICT_COLOR.get(str(v), "#555"),
        style=lambda v: VERDICT_STYLE.get(str(v), "bold"),
    )
    return env


def render(template: str, **context: Any) -> str:
    kind = "html" if template.endswith(".html.j2") else ("md" if ".md." in template else "text")
    return environment(kind).get_template(template).render(**context)
