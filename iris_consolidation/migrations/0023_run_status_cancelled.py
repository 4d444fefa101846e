"""A run cancelled before any worker took a job is "cancelled", no longer "failed".

Runs cancelled before this (status failed, a note "Abandoned: Cancelled by ...") become
cancelled; going back, cancelled runs are failed again (their note still says why).
Values are hard-coded, never imported from the app.
"""

from django.db import migrations, models

OLD_MARK = "Abandoned: Cancelled by "


def cancelled_from_notes(apps, schema_editor):
    Run = apps.get_model("iris_consolidation", "ConsolidationRun")
    Run.objects.filter(status="failed", notes__contains=OLD_MARK).update(status="cancelled")


def cancelled_to_failed(apps, schema_editor):
    Run = apps.get_model("iris_consolidation", "ConsolidationRun")
    Run.objects.filter(status="cancelled").update(status="failed")


class Migration(migrations.Migration):
    dependencies = [
        ("iris_consolidation", "0022_truth_held_since_from_audit"),
    ]

    operations = [
        migrations.AlterField(
            model_name="consolidationrun",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("running", "Running"),
                    ("done", "Done"),
                    ("partial", "Partial (some clusters failed)"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                ],
                default="pending",
                max_length=16,
            ),
        ),
        migrations.RunPython(cancelled_from_notes, reverse_code=cancelled_to_failed),
    ]
