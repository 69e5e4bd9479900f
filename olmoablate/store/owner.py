"""Is the run another spec lends still the identity this spec expects? One check for every stage.

Why a check at all: a reuse is recorded as a place (``<spec>/runs/<id>``, by `plan` in plan.json
or by `submit` in reused.json), and what trains at a place can change after the reuse was
recorded: the owner spec is re-planned (``--replan`` keeps the run folders) or its token file is
rewritten in place (same spec, so no re-plan guard), and the same run id then means another
identity. The owner's folder holds ``identity.json`` (what `submit` sent it to train) and its
plan.json the identity it stands for now; a run is lent only while both equal the borrower's.
`plan` (:mod:`.index`), `submit`'s lease and `status` (`olmoablate.launch`) and the report all
ask here, so a moved owner is never taken as the borrower's run by any of them.
"""

from __future__ import annotations

from pathlib import Path

from olmoablate.contract.filenames import IDENTITY_FILE
from olmoablate.contract.identity import short
from olmoablate.contract.layout import ResultsDir
from olmoablate.contract.plan import Plan
from olmoablate.errors import UserError
from olmoablate.io import read_json


def recorded_identity(run_dir: Path) -> str | None:
    """The identity ``run_dir`` was sent to train (its identity.json; None: none recorded)."""
    try:
        doc = read_json(run_dir / IDENTITY_FILE)
    except (OSError, ValueError):
        return None
    return str(doc["identity"]) if isinstance(doc, dict) and "identity" in doc else None


def owner_problem(
    store: str | Path, where: str, identity: str, plans: dict[str, Plan | str] | None = None
) -> str | None:
    """Why the run at ``<store>/<where>`` is not a run of ``identity`` (None: it is).
    ``plans``: a cache (spec -> its plan, or why it does not load) shared by calls of one view."""
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
