"""One budget for every model call of a run: ``MAX_COST_PER_RUN``, in a fixed order of priority.

A run's calls share its cap in USD (``run_settings.max_cost``; litellm's price map). A call
starts only while the run's recorded spend is below the ceiling of its kind, a share of the
cap (``CEILINGS``); the kinds that come first in the order of priority have the higher
ceilings, so the lower ones stop first and leave the rest of the cap to them:

1. the judge and its second looks: the whole cap (``consolidation.budget_check``);
2. noise, relocation and promotion: ``STAGE_SHARE`` of it;
3. mining: ``MINING_SHARE`` of it.

Mining runs first in a pass, so without its lower ceiling it could spend the whole cap
before the judge is asked anything (a LoCoMo pass sent 73% of its tokens to mining). A
call starts below its ceiling, so the run ends within one call's price of the cap (calls
running at once each start below it: see ``mining``). A model litellm has no price for
makes no call under a cap. What a stage could not afford is deferred (not failed): its
result's first finding counts it (``deferred``), the report says it, and the run keeps
its checkpoint so that the next ``--since last`` pass reaches it again.
"""

from __future__ import annotations

from typing import Any

from ... import run_settings
from ...models import ConsolidationRun

#: Share of the cap below which noise, relocation and promotion may start a call.
STAGE_SHARE = 0.75
#: Share of the cap below which mining may start a call (the last in the order of priority).
MINING_SHARE = 0.5
#: Ceiling of each stage, as a share of the run's cap (the judge's is the whole cap).
CEILINGS = {"noise": STAGE_SHARE, "relocate": STAGE_SHARE, "promote": STAGE_SHARE, "mine": MINING_SHARE}
#: Why a stage's work waits (its findings and the report).
DEFERRED = "deferred: the run's budget (IRIS_CONSOLIDATION_MAX_COST_PER_RUN) reached this stage's ceiling"


def may_call(run: ConsolidationRun, stage: str, client: Any = None) -> bool:
    """Whether ``stage`` may start a model call for ``run`` now: no cap, or the run's
    recorded spend below the stage's ceiling (``CEILINGS`` x the cap) and ``client``'s
    model priced (``price_known``; a client that does not say is taken as priced).
    One query when the run has a cap, none otherwise."""
    cap = run_settings.max_cost(run)
    if cap is None:
        return True
    if client is not None and not getattr(client, "price_known", lambda: True)():
        return False
    spent = ConsolidationRun.objects.filter(pk=run.pk).values_list("cost", flat=True).first() or 0.0
    return spent < cap * CEILINGS[stage]
