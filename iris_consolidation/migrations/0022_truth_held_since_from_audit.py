"""Existing truths are held since their first ``created`` audit row (load_truths, mining,
a merge), where they have one; the others keep 0021's time, that of the migration.

Going back, nothing to do: 0021 drops the column. Values are hard-coded, never imported
from the app.
"""

from django.db import migrations
from django.db.models import Exists, OuterRef, Subquery

CREATED = "created"


def held_since_from_audit(apps, schema_editor):
    Truth = apps.get_model("iris_consolidation", "Truth")
    TruthChange = apps.get_model("iris_consolidation", "TruthChange")
    first = TruthChange.objects.filter(truth=OuterRef("pk"), action=CREATED).order_by("created_at", "id")
    Truth._base_manager.filter(Exists(first)).update(held_since=Subquery(first.values("created_at")[:1]))


class Migration(migrations.Migration):
    dependencies = [
        ("iris_consolidation", "0021_truth_held_since_prune_share"),
    ]

    operations = [migrations.RunPython(held_since_from_audit, reverse_code=migrations.RunPython.noop)]
