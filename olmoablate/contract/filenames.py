"""The name of every file that crosses a stage, defined once.

Why a module with no imports: the shell-completion code and the login-node commands need these
names without loading the plan model, and every stage that writes or reads one of these files
must agree on its name. :mod:`olmoablate.contract.layout` builds the paths from them; nothing
else spells a file name.

Layout (see :class:`olmoablate.contract.layout.ResultsDir` for who writes what)::

    results/<spec>/plan.json  ledger.json  gate.json  comparison.csv  report.md  report.html
                   next_plan.json
    results/<spec>/runs/<run_id>/status.json  summary.json  metrics.jsonl  metrics.arrow
                   fingerprints.jsonl  proof.json  wandb.json  identity.json  reused.json
    <prepared data folder>/manifest.json
"""

from __future__ import annotations

# ------------------------------------------------------------------ a spec's results folder
#: The plan (`olmoablate plan`; :class:`olmoablate.contract.plan.Plan`).
PLAN_FILE = "plan.json"
#: What `submit` launched (launch's own record; :mod:`olmoablate.launch.ledger`).
LEDGER_FILE = "ledger.json"
#: The report's outputs: the verdicts, the comparison table, the documents.
GATE_FILE = "gate.json"
COMPARISON_FILE = "comparison.csv"
REPORT_MD_FILE = "report.md"
REPORT_HTML_FILE = "report.html"
#: The promoted runs of a proceed verdict, a plan `submit` accepts.
NEXT_PLAN_FILE = "next_plan.json"

# ------------------------------------------------------------------ a run's folder
STATUS_FILE = "status.json"
SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.jsonl"
#: The columnar copy of metrics.jsonl, its one cache (:mod:`olmoablate.contract.columnar`).
METRICS_COPY_FILE = "metrics.arrow"
#: The copy releases before the metrics store wrote (read once to seed the new one).
LEGACY_METRICS_COPY_FILE = "metrics.parquet"
FINGERPRINTS_FILE = "fingerprints.jsonl"
PROOF_FILE = "proof.json"
#: The run's W&B id, project and URL (written by the job, read by the report and `results`).
WANDB_FILE = "wandb.json"
IDENTITY_FILE = "identity.json"
REUSED_FILE = "reused.json"

# ------------------------------------------------------------------ prepared token files
#: What `olmoablate data prepare` tokenized, beside the token files it wrote.
MANIFEST_FILE = "manifest.json"
