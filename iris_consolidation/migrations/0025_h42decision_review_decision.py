# The decision a review recorded, stored whole (merging.Decision.to_json). Reviews written
# before have none: applying such a dry run reads its other columns, as before.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("iris_consolidation", "0024_run_stage_calls_cached_stage"),
    ]

    operations = [
        migrations.AddField(
            model_name="clusterreview",
            name="decision",
            field=models.JSONField(
                blank=True,
                help_text="The decision as recorded (merging.Decision.to_json); none before it was kept.",
                null=True,
            ),
        ),
    ]
