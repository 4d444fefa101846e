# The run's judge as data (kind, model) beside its name; 0020 fills them from old names.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('iris_consolidation', '0018_remove_run_mode'),
    ]

    operations = [
        migrations.AddField(
            model_name='consolidationrun',
            name='judge_kind',
            field=models.CharField(blank=True, choices=[('rules', 'Rule judge'), ('llm', 'LLM judge'), ('', 'Another judge, or none')], default='', help_text="Rule judge, LLM judge, or another: whether the run's stages may ask a model.", max_length=8),
        ),
        migrations.AddField(
            model_name='consolidationrun',
            name='judge_model',
            field=models.CharField(blank=True, help_text="The litellm model an LLM judge calls (its calls, the stages' and the forecast's); empty for other judges.", max_length=200),
        ),
    ]
