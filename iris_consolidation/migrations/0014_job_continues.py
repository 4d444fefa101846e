from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('iris_consolidation', '0013_sessions_notes_learned_rules'),
    ]

    operations = [
        migrations.AddField(
            model_name='consolidationjob',
            name='continues',
            field=models.BooleanField(default=False, help_text='Phase 1 goes on in a new delivery; the error field says how far it got.'),
        ),
    ]
