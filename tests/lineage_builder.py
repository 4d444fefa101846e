"""Builds real lineages for tests and benchmarks: verdicts go through the validator and
``merging.record_review``, exactly as a run's phase 2 writes them (only the judge call
is replaced by a verdict written here)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.utils import timezone

from iris_consolidation import text
from iris_consolidation.llm.base import Action, Spend, Verdict
from iris_consolidation.models import ClusterReview, ConsolidationRun, Truth
from iris_consolidation.services.pipeline import judging, merging, validation
from iris_consolidation.services.run import decide, lifecycle

MODEL = "openai/stub-judge"
PROMPT_VERSION = "judge-3"
JUDGE = f"llm:{MODEL}"

#: Ways of saying one fact; a generation-5 lineage merges dozens of them.
PARAPHRASES = (
    "Has a son named Tomas",
    "Is the father of a boy called Tomas",
    "Tomas is his son",
    "Has a little boy, Tomas",
    "Has often mentioned his son Tomas",
    "His son is called Tomas",
    "Is dad to Tomas",
    "He talks about his son Tomas",
)


#: The reason of a careful judge merging the first two paraphrases into the first: it
#: states the words it says otherwise.
SAME_SON = "Same son: 'father of a boy' = 'son'."


def new_run(*, dry_run: bool = False, execution: str = "in_process", user_id: int | None = None) -> ConsolidationRun:
    """A finished run to hang reviews on."""
    run = lifecycle.create_run(
        trigger="command", dry_run=dry_run, execution=execution, threshold=0.75, user_id=user_id, judge=JUDGE
    )
    run.status = ConsolidationRun.Status.DONE
    run.started_at = timezone.now() - timedelta(seconds=3)
    run.finished_at = timezone.now()
    run.save()
    return run


def judge_and_record(
    truths: Sequence[Truth],
    actions: Sequence[Action],
    *,
    run: ConsolidationRun,
    reasoning: str,
    tokens: int = 420,
    latency_ms: int = 830,
) -> ClusterReview:
    """Validate ``actions`` over ``truths`` (aliases t1, t2... oldest first) and record them."""
    request, by_alias = judging.build_request(list(truths))
    verdict = Verdict(
        actions=tuple(actions),
        reasoning=reasoning,
        raw='{"clusters": [{"id": "c1", "actions": [], "reasoning": "recorded by the test builder"}]}',
        model=MODEL,
        prompt_version=PROMPT_VERSION,
        tokens=tokens,
        latency_ms=latency_ms,
        llm_calls=1,
    )
    result = validation.validate(request, verdict.actions, max_length=1000, max_generation=5)
    decision = merging.Decision(
        run_id=run.pk,
        user_id=truths[0].user_id,
        key=judging.cluster_key(list(truths)),
        snapshot=decide.snapshot_members(by_alias, request),
        similarities={alias: round(1.0 - i * 0.03, 3) for i, alias in enumerate(by_alias)},
        judge=JUDGE,
        verdict=verdict,
        accepted=result.accepted,
        rejections=result.rejections,
        spend=Spend(calls=1, prompt_tokens=tokens - tokens // 4, completion_tokens=tokens // 4),
        asked_model=True,
    )
    return merging.record_review(decision=decision, dry_run=run.dry_run)


def merge(truths: Sequence[Truth], *, content: str, run: ConsolidationRun, reasoning: str | None = None) -> Truth:
    """Merge ``truths`` into a new truth with ``content``; returns it (raises if refused)."""
    ordered = sorted(truths, key=lambda t: (t.created_at, t.pk))
    aliases = tuple(f"t{i}" for i in range(1, len(ordered) + 1))
    # Like a careful judge, state each word the content says otherwise.
    reworded = sorted({w for t in ordered for w in text.lost_words(t.content, content)})
    synonyms = "".join(f" {w} = '{content}'." for w in reworded)
    action = Action(action="merge", ids=aliases, content=content, reason="All members state the same fact." + synonyms)
    review = judge_and_record(
        ordered,
        [action],
        run=run,
        reasoning=reasoning or f"{' and '.join(aliases)} say the same thing about Tomas in other words; merged.",
    )
    assert review.applied or review.outcome == ClusterReview.Outcome.PREVIEW, review.skip_reason
    if review.outcome == ClusterReview.Outcome.PREVIEW:
        return ordered[0]
    return Truth.all_objects.get(pk=review.applied_actions[0]["result_id"])


def supersede(old: Truth, new: Truth, *, run: ConsolidationRun, reasoning: str) -> ClusterReview:
    """Retire ``old`` in favour of the later ``new``."""
    action = Action(action="supersede", old=("t1",), new="t2", reason="The later statement replaces the earlier one.")
    review = judge_and_record([old, new], [action], run=run, reasoning=reasoning)
    assert review.applied, review.skip_reason
    return review


def originals(user: Any, count: int, *, start: Any = None) -> list[Truth]:
    """``count`` promoted generation-0 paraphrases about Tomas, one minute apart."""
    start = start or timezone.now() - timedelta(days=60)
    return [
        Truth.objects.create(
            user=user,
            content=PARAPHRASES[i % len(PARAPHRASES)],
            created_at=start + timedelta(minutes=i),
            score=0.5 + (i % 5) / 10,
            source=f"session:{1000 + i}",
        )
        for i in range(count)
    ]


def generation_tree(user: Any, *, generations: int = 5) -> tuple[Truth, list[Truth], list[ConsolidationRun]]:
    """A truth of generation ``generations`` built by pairwise merges from
    ``2 ** generations`` originals, one run per generation (32 originals for 5).
    Returns (root, originals, runs)."""
    level = originals(user, 2**generations)
    first = list(level)
    runs = []
    for _generation in range(1, generations + 1):
        run = new_run(user_id=user.pk)
        runs.append(run)
        # Each merge keeps the older member's wording: a text its sources stated, which
        # the validator accepts (it refuses words that no source used).
        level = [merge(level[i : i + 2], content=level[i].content, run=run) for i in range(0, len(level), 2)]
    return level[0], first, runs
