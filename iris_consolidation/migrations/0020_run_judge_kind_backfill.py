"""Fill ``judge_kind`` and ``judge_model`` of existing runs from their judge's name.

An LLM judge's name is "llm:" and its litellm model, the rule judge's "rules"; any other
name (or none) keeps the blank kind. Going back, the two columns are dropped by 0019:
the name is unchanged. Values are hard-coded, never imported from the app.
"""

from django.db import migrations
from django.db.models.functions import Substr

LLM_PREFIX = "llm:"


def kind_from_name(apps, schema_editor):
    Run = apps.get_model("iris_consolidation", "ConsolidationRun")
    Run.objects.filter(judge="rules").update(judge_kind="rules", judge_model="")
    Run.objects.filter(judge__startswith=LLM_PREFIX).update(
        judge_kind="llm", judge_model=Substr("judge", len(LLM_PREFIX) + 1)
    )


class Migration(migrations.Migration):
    dependencies = [
        ("iris_consolidation", "0019_run_judge_kind"),
    ]

    operations = [migrations.RunPython(kind_from_name, reverse_code=migrations.RunPython.noop)]
