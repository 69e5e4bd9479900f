"""Refresh `olmoablate/plan/olmo_eval_tasks.json`: the downstream task list of the pinned
ai2-olmo-eval, shipped so that `validate`/`plan` check task names and metric suffixes on a light
CI install (no torch, no ai2-olmo-eval; .github/workflows/validate-specs.yml).

Run in an environment with the `eval` extra installed (it imports olmo_eval, hence torch):

    python scripts/refresh-eval-tasks.py          # rewrite the file
    python scripts/refresh-eval-tasks.py --check  # exit 1 if the shipped file is stale

tests/plan/test_checks_downstream.py runs the same comparison against the installed package.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "olmoablate" / "plan" / "olmo_eval_tasks.json"


def current() -> dict[str, Any]:
    """{package, version, tasks: {label: metric_type}} of the installed ai2-olmo-eval."""
    from olmo_eval.tasks import LABEL_TO_TASK_MAP

    tasks: dict[str, str] = {}
    for label, entry in LABEL_TO_TASK_MAP.items():
        cls, kwargs = entry if isinstance(entry, tuple) else (entry, {})
        tasks[label] = str(kwargs.get("metric_type") or cls.metric_type)
    return {
        "package": "ai2-olmo-eval",
        "version": importlib.metadata.version("ai2-olmo-eval"),
        "tasks": dict(sorted(tasks.items())),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 when stale")
    args = ap.parse_args()
    doc = current()
    text = json.dumps(doc, indent=1) + "\n"
    if args.check:
        same = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        print(f"{OUT}: {'up to date' if same else 'STALE'} (ai2-olmo-eval {doc['version']})")
        sys.exit(0 if same else 1)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}: {len(doc['tasks'])} tasks of ai2-olmo-eval {doc['version']}")


if __name__ == "__main__":
    main()
