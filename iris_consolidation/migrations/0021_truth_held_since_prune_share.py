# When the installation first held each truth (decay's clock starts no earlier), the prune
# cap as a live setting, and the prune stage's refusals. AddField computes the callable
# default once: every existing truth is held since this migration ran; 0022 takes an
# earlier time from the audit rows where they have one.

import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('iris_consolidation', '0020_run_judge_kind_backfill'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='livesettings',
            name='max_prune_share',
            field=models.FloatField(blank=True, help_text="Most of a user's live truths one pass may prune, a share from 0 to 1 (0.1: 10%). Empty: IRIS_CONSOLIDATION_MAX_PRUNE_SHARE.", null=True),
        ),
        migrations.AddField(
            model_name='stageresult',
            name='refused',
            field=models.PositiveIntegerField(default=0, help_text='Of those, held back by a cap and left live (prune: the share cap).'),
        ),
        migrations.AddField(
            model_name='truth',
            name='held_since',
            field=models.DateTimeField(default=django.utils.timezone.now, help_text='When this installation first held the truth (loaded, mined, written or made by a merge); decay counts no disuse before it. created_at keeps the date the truth was stated.'),
        ),
        migrations.AddConstraint(
            model_name='livesettings',
            constraint=models.CheckConstraint(condition=models.Q(('max_prune_share__isnull', True), models.Q(('max_prune_share__gte', 0), ('max_prune_share__lte', 1)), _connector='OR'), name='live_settings_prune_share_in_range'),
        ),
    ]
