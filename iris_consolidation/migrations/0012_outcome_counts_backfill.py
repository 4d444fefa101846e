"""Recount the outcome counters of existing runs from their reviews.

``kept`` used to count every cluster with nothing applied (rejected and stale ones too)
and ``rejected`` the refused actions; now each cluster counts once among kept,
rejected, stale and deferred. Values are hard-coded here, never imported from the app.
"""

from django.db import migrations

#: Start of merging.CAP_REACHED, for rows written before rejections carried a code.
CAP_WORDING = "The run reached its cap of"


def _deferred(rejections):
    if not rejections:
        return False
    return all(
        r.get("code") == "cap_reached" or str(r.get("reason", "")).startswith(CAP_WORDING) for r in rejections
    )


def recount(apps, schema_editor):
    Run = apps.get_model("iris_consolidation", "ConsolidationRun")
    Review = apps.get_model("iris_consolidation", "ClusterReview")
    for run_id in Run.objects.values_list("pk", flat=True).iterator(chunk_size=500):
        counts = {"kept": 0, "rejected": 0, "stale": 0, "deferred": 0}
        rows = Review.objects.filter(run_id=run_id, outcome__in=["kept", "rejected", "stale", "deferred"])
        for outcome, rejections in rows.values_list("outcome", "rejections").iterator(chunk_size=500):
            if outcome == "rejected":
                counts["deferred" if _deferred(rejections) else "rejected"] += 1
            else:
                counts[outcome] += 1
        Run.objects.filter(pk=run_id).update(**counts)


def forwards_only(apps, schema_editor):
    """Going back keeps the new counts: the old ``kept`` cannot be told apart again."""


class Migration(migrations.Migration):
    dependencies = [
        ("iris_consolidation", "0011_outcome_counts_once"),
    ]

    operations = [migrations.RunPython(recount, reverse_code=forwards_only)]
