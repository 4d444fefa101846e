"""Fill ``dry_run`` from the old ``mode`` (queued / sync / dry_run), and back.

``mode`` said two things: whether the run writes (``dry_run``) and, for ``sync``, that
it ran in process, which ``execution`` already holds (0007 filled it). Going back,
``mode`` is rebuilt from both. Values are hard-coded, never imported from the app.
"""

from django.db import migrations


def mode_to_dry_run(apps, schema_editor):
    Run = apps.get_model("iris_consolidation", "ConsolidationRun")
    Run.objects.filter(mode="dry_run").update(dry_run=True)
    Run.objects.filter(mode="sync").update(execution="in_process")


def dry_run_to_mode(apps, schema_editor):
    Run = apps.get_model("iris_consolidation", "ConsolidationRun")
    Run.objects.filter(dry_run=True).update(mode="dry_run")
    Run.objects.filter(dry_run=False, execution="in_process").update(mode="sync")
    Run.objects.filter(dry_run=False).exclude(execution="in_process").update(mode="queued")


class Migration(migrations.Migration):
    dependencies = [
        ("iris_consolidation", "0016_run_dry_run"),
    ]

    operations = [migrations.RunPython(mode_to_dry_run, reverse_code=dry_run_to_mode)]
