"""The verdict cache: a cluster already judged "keep" is not sent to the judge again.

An entry's key is a sha256 over the user, the judge's model, its prompt version and
the sorted hashes of the members exactly as the judge sees them (content,
created_at, generation, protected; the per-call alias excluded). Any change to a
member, the prompt or the model therefore gives another key and misses: nothing
needs to be deleted to invalidate an entry. Only "keep" verdicts (no action) are
cached: a merge or supersede changes the members, so its cluster never recurs.

A judge that declares no ``prompt_version`` is never cached, since nothing would
tell when its behaviour changed. Dry runs store their "keep" verdicts too: keeping
changes nothing, so a previewed keep is the same decision a real run would apply.
"""

from __future__ import annotations

import hashlib
import json
import logging

from django.db.models import F
from django.utils import timezone

from ...llm.base import JudgeClient, JudgeRequest, MemberView, Verdict
from ...models import ConsolidationRun, RunId, VerdictCacheEntry

logger = logging.getLogger(__name__)

CACHED_REASONING = (
    'Kept without a judge call: the same members were judged "keep" by {model} with prompt '
    "{prompt_version} on {when}. Original reasoning: {reasoning}"
)


def judge_identity(client: JudgeClient) -> tuple[str, str]:
    """``(model, prompt_version)`` of ``client``; the version is "" when it declares none."""
    model = str(getattr(client, "model", "") or client.name)
    return model, str(getattr(client, "prompt_version", "") or "")


def member_hash(member: MemberView) -> str:
    """sha256 of one member as the judge sees it, without its per-call alias."""
    wire = member.as_wire()
    wire.pop("id", None)
    return hashlib.sha256(json.dumps(wire, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def cache_key(*, user_id: int, request: JudgeRequest, model: str, prompt_version: str) -> tuple[str, list[str]]:
    """The entry key for ``request`` and the sorted member hashes it covers."""
    hashes = sorted(member_hash(m) for m in request.members)
    payload = json.dumps({"user": user_id, "model": model, "prompt": prompt_version, "members": hashes})
    return hashlib.sha256(payload.encode()).hexdigest(), hashes


def lookup(*, user_id: int, request: JudgeRequest, client: JudgeClient) -> VerdictCacheEntry | None:
    """The cached "keep" entry for this cluster state, judge and prompt, if any. Reads only."""
    model, version = judge_identity(client)
    if not version:
        return None
    key, _ = cache_key(user_id=user_id, request=request, model=model, prompt_version=version)
    return VerdictCacheEntry.objects.filter(key=key).first()


def store_keep(*, user_id: int, request: JudgeRequest, client: JudgeClient, verdict: Verdict) -> bool:
    """Remember a "keep" verdict; returns True if an entry now exists for it.

    Stores nothing for a verdict with actions, for a judge without a prompt version,
    or when the verdict reports another model or prompt than the judge declared.
    Idempotent (``get_or_create`` on the key).
    """
    model, version = judge_identity(client)
    if verdict.actions or not version or (verdict.model, verdict.prompt_version) != (model, version):
        return False
    key, hashes = cache_key(user_id=user_id, request=request, model=model, prompt_version=version)
    VerdictCacheEntry.objects.get_or_create(
        key=key,
        defaults={
            "user_id": user_id,
            "model": model,
            "prompt_version": version,
            "member_hashes": hashes,
            "reasoning": verdict.reasoning,
        },
    )
    return True


def cached_verdict(entry: VerdictCacheEntry) -> Verdict:
    """The "keep" verdict an entry stands for; no call, no tokens, no cost."""
    return Verdict(
        actions=(),
        reasoning=CACHED_REASONING.format(
            model=entry.model,
            prompt_version=entry.prompt_version,
            when=entry.created_at.isoformat(timespec="seconds"),
            reasoning=entry.reasoning or "-",
        ),
        model=entry.model,
        prompt_version=entry.prompt_version,
        llm_calls=0,
        attempts=0,
    )


def use_cached_keep(
    *, user_id: int, request: JudgeRequest, client: JudgeClient, run_id: RunId | None = None
) -> Verdict | None:
    """The cached "keep" verdict for this cluster state, judge and prompt, or None.

    On a hit the entry's hit counter and the run's ``cache_hits`` go up; the caller
    makes no judge call. On a miss nothing is written.
    """
    entry = lookup(user_id=user_id, request=request, client=client)
    if entry is None:
        return None
    VerdictCacheEntry.objects.filter(pk=entry.pk).update(hits=F("hits") + 1, last_hit_at=timezone.now())
    if run_id is not None:
        ConsolidationRun.objects.filter(pk=run_id).update(cache_hits=F("cache_hits") + 1)
    logger.debug("verdict cache hit for a cluster of user %s", user_id)
    return cached_verdict(entry)
