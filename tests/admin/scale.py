"""The data set and the pages of the admin's query-count budget: one user with 1,000
truths, among them a generation-5 truth made from 32 originals in 31 merges over 5
runs, plus a dry run. Shared by ``test_query_budget.py`` and
``benchmarks/admin_query_counts.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from iris_consolidation.llm.base import Action
from iris_consolidation.models import ClusterReview, LineageEvent, Truth
from tests import lineage_builder as lb

TRUTHS = 1000


@dataclass(frozen=True)
class Page:
    name: str
    url: str
    budget: int  # most queries allowed, whatever the number of rows


def build() -> dict[str, Any]:
    """Create the data set; returns the objects the pages point at."""
    User = get_user_model()
    user = User.objects.create(username="dana")
    root, originals, runs = lb.generation_tree(user, generations=5)
    made = Truth.all_objects.filter(user=user).count()
    Truth.objects.bulk_create(
        Truth(user=user, content=f"Fact number {i} about Dana", score=(i % 10) / 10, generation=0)
        for i in range(TRUTHS - made)
    )
    dry = lb.new_run(dry_run=True, user_id=user.pk)
    fresh = list(Truth.objects.filter(user=user, content__startswith="Fact number").order_by("pk")[:20])
    for i in range(0, 20, 2):
        action = Action(action="merge", ids=("t1", "t2"), content=fresh[i].content, reason="same")
        lb.judge_and_record(fresh[i : i + 2], [action], run=dry, reasoning="Previewed.")
    return {"user": user, "root": root, "original": originals[0], "runs": runs, "dry": dry}


def pages(data: dict[str, Any]) -> list[Page]:
    """The admin pages an operator uses, with their query budgets."""
    root, user = data["root"], data["user"]
    review = ClusterReview.objects.filter(run=data["runs"][-1]).first()
    event = LineageEvent.objects.filter(result=root).first()
    truths = reverse("admin:iris_consolidation_truth_changelist")
    return [
        Page("truth list (live, 100 per page)", truths, 12),
        Page("truth list, all incl. retired", f"{truths}?status=all", 12),
        Page("truth list, one user", f"{truths}?user={user.username}", 12),
        Page("truth list, search", f"{truths}?q=Tomas", 12),
        Page("truth change page (generation 5)", reverse("admin:iris_consolidation_truth_change", args=[root.pk]), 10),
        Page("lineage, generation 5 (63 truths)", reverse("admin:iris_consolidation_truth_lineage", args=[root.pk]), 8),
        Page("lineage, expanded", reverse("admin:iris_consolidation_truth_lineage", args=[root.pk]) + "?expand=all", 8),
        Page(
            "lineage of an original (5 steps forward)",
            reverse("admin:iris_consolidation_truth_lineage", args=[data["original"].pk]),
            8,
        ),
        Page("undo confirmation (generation 5)", reverse("admin:iris_consolidation_truth_undo", args=[root.pk]), 10),
        Page("run list", reverse("admin:iris_consolidation_consolidationrun_changelist"), 10),
        Page(
            "run page, 16 reviews",
            reverse("admin:iris_consolidation_consolidationrun_change", args=[data["runs"][0].pk]),
            14,
        ),
        Page(
            "dry-run page, 10 previews",
            reverse("admin:iris_consolidation_consolidationrun_change", args=[data["dry"].pk]),
            14,
        ),
        Page("review list", reverse("admin:iris_consolidation_clusterreview_changelist"), 10),
        Page("review page", reverse("admin:iris_consolidation_clusterreview_change", args=[review.pk]), 10),
        Page("lineage event list", reverse("admin:iris_consolidation_lineageevent_changelist"), 10),
        Page("lineage event page", reverse("admin:iris_consolidation_lineageevent_change", args=[event.pk]), 10),
        Page("truth change audit list", reverse("admin:iris_consolidation_truthchange_changelist"), 10),
        Page("truth history (generation 5)", reverse("admin:iris_consolidation_truth_history", args=[root.pk]), 10),
        Page("live settings (add form)", reverse("admin:iris_consolidation_livesettings_add"), 10),
    ]


def measure(client: Any, page: Page) -> tuple[int, int]:
    """(status code, number of queries) of one GET."""
    with CaptureQueriesContext(connection) as queries:
        response = client.get(page.url)
    return response.status_code, len(queries)
