"""Small helpers shared by the foundation tests (plain functions, no fixtures).

``truth_state()`` photographs every truth row (live and retired, every column) so a
test can assert that a failed or dry write left the table exactly as it was.
The builders (``judge_request``, ``merge_action``/``merge_dict``, ``consolidate``) make
the requests, actions and one-cluster runs the tests judge; model imports stay inside
the functions, so ``tests/llm_stub.py`` can import this module before Django is set up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from iris_consolidation.llm.base import Action, JudgeRequest, MemberView
from iris_consolidation.services.pipeline import validation


def _plain(value: Any) -> Any:
    """Embeddings come back as lists or numpy arrays depending on pgvector's version."""
    if hasattr(value, "tolist"):
        return [round(float(x), 6) for x in value.tolist()]
    if isinstance(value, list):
        return [round(float(x), 6) for x in value]
    return value


#: Columns the decay stage writes on every real pass, whatever the judge decides (a clock,
#: like ``updated_at`` for edits); ``tests/services/hygiene/test_decay.py`` checks them.
DECAY_COLUMNS = ("relevance", "last_decayed")


def truth_state(*, with_decay: bool = False) -> dict[int, dict[str, Any]]:
    """Every truth row, keyed by id, with every column (embedding as a rounded list);
    the decay columns only ``with_decay`` (a dry run must leave even those)."""
    from iris_consolidation.models import Truth

    skip = () if with_decay else DECAY_COLUMNS
    return {
        row["id"]: {k: _plain(v) for k, v in row.items() if k not in skip}
        for row in Truth.all_objects.order_by("id").values()
    }


def history_counts() -> dict[str, int]:
    """Row counts of the tables a consolidation writes besides truths."""
    from iris_consolidation.models import ClusterReview, ConsolidationRun, LineageEvent, Truth

    return {
        "truths": Truth.all_objects.count(),
        "reviews": ClusterReview.objects.count(),
        "events": LineageEvent.objects.count(),
        "runs": ConsolidationRun.objects.count(),
        "memberships": ClusterReview.members.through.objects.count(),
    }


def parse_summary(output: str) -> dict[str, str]:
    """The ``key=value`` pairs of the command's ``Summary:`` line."""
    line = next(line for line in output.splitlines() if line.startswith("Summary: "))
    return dict(part.split("=", 1) for part in line.removeprefix("Summary: ").split())


def rules_run(user: Any, *, dry_run: bool = False) -> Any:
    """A run over ``user``'s truths with the rule judge, executed in this process, refreshed."""
    from iris_consolidation.embeddings import get_embedder
    from iris_consolidation.llm.rules import RuleJudge
    from iris_consolidation.services.queue import execution
    from iris_consolidation.services.run import lifecycle

    run = lifecycle.create_run(
        trigger="command", dry_run=dry_run, execution="in_process", threshold=0.75, user_id=user.pk, judge="rules")
    execution.run_sync(run=run, client=RuleJudge(), embedder=get_embedder())
    run.refresh_from_db()
    return run


# --- builders: judge requests, actions, one-cluster runs ----------------------------------

#: When member t1 of a ``judge_request`` was created; t2 a day later, and so on.
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def judge_request(
    *contents: str, first: int = 1, every: Mapping[str, Any] | None = None, **members: Mapping[str, Any]
) -> JudgeRequest:
    """A request over ``contents`` as members t1, t2, ... (from ``t{first}``), created a
    day apart from ``T0``, oldest first.

    Fields of one member go by its alias, ``t2={"protected": True}``; fields of every
    member in ``every``, ``every={"generation": 2}`` (``MemberView`` raises TypeError
    on an unknown field). A keyword that names no member raises ValueError.
    """
    aliases = [f"t{i}" for i in range(first, first + len(contents))]
    if unknown := set(members) - set(aliases):
        raise ValueError(f"no member {sorted(unknown)} among {aliases}")
    return JudgeRequest(
        members=tuple(
            MemberView(
                alias=alias,
                content=content,
                created_at=T0 + timedelta(days=day),
                **{**(every or {}), **members.get(alias, {})},
            )
            for day, (alias, content) in enumerate(zip(aliases, contents, strict=True))
        )
    )


def merge_action(ids: Sequence[str], content: str, reason: str = "same fact") -> Action:
    """A judge's merge of the aliases ``ids`` into ``content``."""
    return Action(action="merge", ids=tuple(ids), content=content, reason=reason)


def supersede_action(old: Sequence[str], new: str, reason: str = "changed") -> Action:
    """A judge's supersede of the aliases ``old`` by the alias ``new``."""
    return Action(action="supersede", old=tuple(old), new=new, reason=reason)


def merge_dict(ids: Sequence[str], content: str, reason: str = "same fact") -> dict[str, Any]:
    """``merge_action`` as a model writes it in a reply (the wire form, ids a list)."""
    return {"action": "merge", "ids": list(ids), "content": content, "reason": reason}


def supersede_dict(old: Sequence[str], new: str, reason: str = "changed") -> dict[str, Any]:
    """``supersede_action`` as a model writes it in a reply (the wire form, old a list)."""
    return {"action": "supersede", "old": list(old), "new": new, "reason": reason}


def refusal_codes(
    request: JudgeRequest, *actions: Action, max_length: int = 1000, refuse_signals: bool = True
) -> list[str]:
    """The codes of the validator's refusals of ``actions`` over ``request`` (generation
    limit 5). Signals refuse, as for the rule judge; ``refuse_signals=False``: the
    invariants alone, as for a model's actions."""
    result = validation.validate(
        request, actions, max_length=max_length, max_generation=5, refuse_signals=refuse_signals
    )
    return [r.code for r in result.rejections]


#: The reason a careless model gives for every merge.
CARELESS = "They are the same fact."


def merge_all_codes(
    contents: Sequence[str], content: str, reason: str = CARELESS, *, refuse_signals: bool = True
) -> list[str]:
    """``refusal_codes`` of one merge of every member of ``judge_request(*contents)`` into ``content``."""
    request = judge_request(*contents)
    return refusal_codes(
        request, merge_action([m.alias for m in request.members], content, reason), refuse_signals=refuse_signals
    )


# Careless models: every member merged into the shortest text, the oldest text, or all texts joined.
def shortest_codes(contents: Sequence[str]) -> list[str]:
    return merge_all_codes(contents, min(contents, key=len))


def oldest_codes(contents: Sequence[str]) -> list[str]:
    return merge_all_codes(contents, contents[0])


def joined_codes(contents: Sequence[str]) -> list[str]:
    return merge_all_codes(contents, "; ".join(contents))


def cluster_of(*truths: Any, similarities: Sequence[float] | None = None) -> Any:
    """The candidate cluster of ``truths`` (the first is the seed), every similarity 1.0
    unless given (one per truth)."""
    from iris_consolidation.services.pipeline.clustering import CandidateCluster

    return CandidateCluster(
        user_id=truths[0].user_id,
        member_ids=tuple(t.pk for t in truths),
        similarities=tuple(similarities) if similarities is not None else (1.0,) * len(truths),
    )


def consolidate(
    *truths: Any,
    embedder: Any,
    client: Any = None,
    run: Any = None,
    similarities: Sequence[float] | None = None,
) -> Any:
    """Judge and apply the cluster of ``truths`` (``cluster_of``) in ``run`` (a new sync
    run if None) with ``client`` (the rule judge if None): the ``ClusterReview``. Raises
    whatever ``decide.decide_cluster`` raises."""
    from iris_consolidation.llm.rules import RuleJudge
    from iris_consolidation.services.run import decide, lifecycle

    if run is None:
        run = lifecycle.create_run(trigger="command", execution="in_process", threshold=0.75, user_id=None)
    return decide.decide_cluster(
        run_id=run.pk,
        cluster=cluster_of(*truths, similarities=similarities),
        client=client if client is not None else RuleJudge(),
        embedder=embedder,
    )


def waiting_run(user: Any, *, minutes: float = 10) -> Any:
    """A queued admin run over ``user``, running for ``minutes`` with one user job queued
    as long ago and claimed by no worker (the console says it waits for a worker)."""
    from django.utils import timezone

    from iris_consolidation.models import ConsolidationJob, ConsolidationRun
    from iris_consolidation.services.run import lifecycle

    since = timezone.now() - timedelta(minutes=minutes)
    run = lifecycle.create_run(trigger="admin", execution="queued", threshold=0.75, user_id=user.pk)
    ConsolidationRun.objects.filter(pk=run.pk).update(status="running", started_at=since, users=1)
    ConsolidationJob.objects.create(run=run, kind="user", key=f"user:{user.pk}", user=user, created_at=since)
    run.refresh_from_db()
    return run
