# Adds the live settings' risk policy (what a model's action with signals gets).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('iris_consolidation', '0014_job_continues'),
    ]

    operations = [
        migrations.AddField(
            model_name='livesettings',
            name='risk_policy',
            field=models.CharField(blank=True, choices=[('verify', 'Ask the model a second look; apply what it confirms'), ('refuse', 'Refuse it (as the rule judge does)'), ('accept', 'Apply it; record the signals only')], help_text="What a model's action that passes every invariant but raises a signal gets: a second look by the model (verify), a refusal, or acceptance. Empty: IRIS_CONSOLIDATION_RISK_POLICY.", max_length=8),
        ),
    ]
