"""Admin registrations: the operator's console.

- ``truths``: the truth list (filters, search, pin/unpin and run actions) and pages;
- ``lineage``: the lineage view mixin (ancestors to generation 0, forwards, as a picture);
- ``undo``: the undo confirmation pages of truths and reviews;
- ``runs``: the run list and a run's page (progress, reviews);
- ``run_actions``: retrying, cancelling and applying a run (a dry run's verdicts);
- ``reviews``: cluster reviews and lineage events;
- ``knowledge``: chat sessions, notes and learned rules (hygiene part 2);
- ``records``: what is kept between runs (audit, cursors, passes, verdict cache) and the live settings;
- ``base``: permission helpers and read-only history admins.

Seeing anything needs the view permission on truths (runs and reviews show truth
text); pinning, running, applying and undoing need the change permission on truths.
"""

from . import (
    knowledge,  # noqa: F401  (sessions, notes, learned rules)
    records,  # noqa: F401  (audit, cursors, passes, verdict cache, live settings)
)
from .reviews import ClusterReviewAdmin, LineageEventAdmin
from .runs import ConsolidationRunAdmin
from .truths import TruthAdmin

__all__ = ["ClusterReviewAdmin", "ConsolidationRunAdmin", "LineageEventAdmin", "TruthAdmin"]
