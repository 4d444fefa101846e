# The run's mode is now dry_run (0017 copied it) and execution.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('iris_consolidation', '0017_run_dry_run_backfill'),
    ]

    operations = [
        migrations.RemoveField(
            model_name='consolidationrun',
            name='mode',
        ),
    ]
