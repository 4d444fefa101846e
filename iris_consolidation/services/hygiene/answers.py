"""Answers remembered: relocation's "keep" and promotion's "not a rule", per truth.

The judge's verdict cache (``pipeline/verdict_cache.py``) remembers a cluster judged
"keep"; this module does the same for the two stages that ask a model about single
truths. An answer's key is a sha256 over the stage, the user, the model, the stage's
prompt version and the truth's text exactly as the model sees it: a change to any of
them gives another key and the truth is asked about again; nothing needs deleting.
Only the answers that leave a truth as it is are remembered: a relocated truth is
retired and a promoted one is linked to its rule, so neither is offered again.

Entries are ``VerdictCacheEntry`` rows with ``stage`` set ("relocate", "promote"),
``member_hashes`` the text's hash and ``reasoning`` what the model said (or why it was
left as it is). Dry runs remember too: leaving a truth as it is changes nothing, so the
preview's answer is the one a real run would act on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from django.db.models import F
from django.utils import timezone

from ...models import VerdictCacheEntry

#: The stages whose answers are remembered.
RELOCATE = "relocate"
PROMOTE = "promote"


def content_hash(content: str) -> str:
    """sha256 of a truth's text as the model is sent it."""
    return hashlib.sha256(content.encode()).hexdigest()


def answer_key(*, stage: str, user_id: int, model: str, prompt_version: str, content: str) -> str:
    """The entry key of one truth's answer (see the module docstring)."""
    payload = json.dumps(
        {"stage": stage, "user": user_id, "model": model, "prompt": prompt_version, "content": content_hash(content)},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def remembered(
    *, stage: str, user_id: int, model: str, prompt_version: str, contents: Iterable[str], count_hits: bool = True
) -> set[str]:
    """The texts among ``contents`` whose answer is remembered for this stage, model and
    prompt (empty without a model or a prompt version). ``count_hits``: add one to each
    entry's hits (a pass that acts on them; a forecast does not). One query (two with hits)."""
    if not model or not prompt_version:
        return set()
    keys = {
        answer_key(stage=stage, user_id=user_id, model=model, prompt_version=prompt_version, content=c): c
        for c in contents
    }
    if not keys:
        return set()
    found = list(VerdictCacheEntry.objects.filter(key__in=list(keys)).values_list("key", flat=True))
    if found and count_hits:
        VerdictCacheEntry.objects.filter(key__in=found).update(hits=F("hits") + 1, last_hit_at=timezone.now())
    return {keys[k] for k in found}


def remember(
    *, stage: str, user_id: int, model: str, prompt_version: str, answers: dict[str, str]
) -> int:
    """Remember ``answers`` (a truth's text -> what the model said of it) as "leave it as
    it is"; returns how many entries are new. Nothing without a model or a prompt
    version. Idempotent: an entry already there is kept (one insert, conflicts ignored)."""
    if not model or not prompt_version or not answers:
        return 0
    rows = [
        VerdictCacheEntry(
            key=answer_key(stage=stage, user_id=user_id, model=model, prompt_version=prompt_version, content=content),
            user_id=user_id, stage=stage, model=model, prompt_version=prompt_version,
            member_hashes=[content_hash(content)], reasoning=reason[:1000],
        )
        for content, reason in answers.items()
    ]
    before = VerdictCacheEntry.objects.filter(key__in=[r.key for r in rows]).count()
    VerdictCacheEntry.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows) - before
