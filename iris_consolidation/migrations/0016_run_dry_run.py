# A run's dry_run flag, beside execution; the old mode column goes in 0018.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('iris_consolidation', '0015_live_risk_policy'),
    ]

    operations = [
        migrations.AddField(
            model_name='consolidationrun',
            name='dry_run',
            field=models.BooleanField(default=False, help_text='Judged and recorded, but no truth changed (a preview).'),
        ),
    ]
