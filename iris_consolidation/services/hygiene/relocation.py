"""The relocate stage (rho's vault relocation): reference-heavy truths move to notes.

**Candidates** (live, unprotected truths that are not pointers already):
- by the rule, offline and with a model: ``is_reference_heavy``: at least
  ``IRIS_CONSOLIDATION_RELOCATE_MIN_CHARS`` characters (280), or a list or step
  structure (3 or more lines that start with "-", "*", "1." or "Step n"), or changelog
  form (2 or more entries that start with a date or a version number);
- with a model (the run's judge is the LLM judge), every truth of at least half that
  length is offered in one classification call (contract in ``llm/hygiene.py``), and
  the model's choice replaces the rule's for them: it titles and summarises the note.
  A truth it leaves out is "keep": that answer is remembered per truth text, model and
  prompt version (``answers``), and the truth is not offered again until one changes.

**Apply** (real runs in ``apply`` mode), per truth in one transaction: the ``Note`` is
written first (slug from the title, unique per user; the truth's text; ``## Connections``
with ``[[wikilinks]]`` to the user's notes that share a title word), then a pointer truth
"See [[slug]]: <one line>" is created (live, origin ``consolidated``, pinned so that no
stage rewords or retires it), then the truth is retired with reason ``relocated`` and
``superseded_by`` the pointer, with a ``LineageEvent`` (relocate) and ``TruthChange``
rows. If any step fails, nothing of it stays. ``undo_relocation`` reverses it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import BooleanField, ExpressionWrapper, F, Q
from django.utils import timezone
from django.utils.text import slugify

from ...conf import app_settings
from ...exceptions import JudgeRateLimited, JudgeResponseInvalid, JudgeUnavailable, UndoRefused
from ...llm import hygiene as prompts
from ...models import ConsolidationRun, LineageEvent, Note, Origin, RetiredReason, Truth
from ..pipeline import truth_events
from . import answers, budget

logger = logging.getLogger(__name__)

ACTOR = "hygiene:relocate"
#: Tag of pointer truths (never candidates themselves).
POINTER_TAG = "note-pointer"
POINTER = "See [[{slug}]]: {line}"
#: Longest one-line summary in a pointer truth (characters).
POINTER_LINE = 120

LIST_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)]|step\s+\d+\b)", re.I)
CHANGELOG_ENTRY = re.compile(
    r"(?:^|\n|;\s*)\s*(?:\d{4}-\d{2}-\d{2}|v?\d+\.\d+(?:\.\d+)?\b|(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)"
    r"[a-z]*\.? \d{1,2},? \d{4})", re.I,
)

CHANGED = "Truth #{truth} changed or was retired while it was relocated; nothing was written."
NOT_RELOCATED = "Truth #{truth} was not relocated to a note; there is nothing to undo here."


def is_reference_heavy(content: str, *, min_chars: int | None = None) -> str:
    """Why ``content`` is reference-heavy by the rule ("length", "list", "changelog"), or ""."""
    min_chars = int(min_chars if min_chars is not None else app_settings.RELOCATE_MIN_CHARS)
    lines = content.splitlines()
    if len(lines) >= 3 and sum(1 for line in lines if line.strip() and LIST_ITEM.match(line)) >= 3:
        return "list"
    # Only the first entry may start at the text's start: a second needs a "\n" or a ";".
    if ("\n" in content or ";" in content) and len(CHANGELOG_ENTRY.findall(content)) >= 2:
        return "changelog"
    if len(content) >= min_chars:
        return "length"
    return ""


@dataclass(frozen=True, kw_only=True)
class Move:
    """A truth to relocate: the note's title and the pointer's one-line summary, and why."""

    truth: Truth
    title: str
    summary: str
    reason: str


def _first_sentence(text: str, limit: int) -> str:
    first = re.split(r"(?<=[.!?])\s|\n", text.strip(), maxsplit=1)[0].strip(" -*")
    return first if len(first) <= limit else first[: limit - 3].rstrip() + "..."


def rule_move(truth: Truth, why: str) -> Move:
    """The offline note of ``truth``: title and summary from its first sentence."""
    return Move(truth=truth, title=_first_sentence(truth.content, 60), summary=_first_sentence(truth.content, 100),
                reason=f"reference-heavy by the rule ({why})")


#: The fields a candidate is read with (a move, the model's prompt and the report use these only;
#: the embedding, the largest column by far, is never read here).
CANDIDATE_FIELDS = ("id", "user_id", "content", "kind", "tags", "created_at")


def is_pointer() -> ExpressionWrapper:
    """Whether a truth's ``tags`` hold ``POINTER_TAG``, as a query expression (PostgreSQL's
    ``tags @> '["note-pointer"]'``; NULL, read as False, for NULL tags): the tags
    themselves need no reading, nor their JSON decoding."""
    return ExpressionWrapper(Q(tags__contains=[POINTER_TAG]), output_field=BooleanField())


def _candidate_rows(user_id: int, rows: Sequence[tuple[int, str, Any]] | None = None) -> list[tuple[int, str]]:
    """``(id, content)`` of ``candidates(user_id)``, in the same order, without building
    truths; from ``rows`` (``(id, content, pointer)`` of the consolidatable truths in
    order, ``pointer`` as ``is_pointer``) when the caller read them already."""
    if rows is None:
        rows = (
            Truth.objects.for_user(user_id).consolidatable(max_generation=app_settings.MAX_GENERATION)
            .annotate(pointer=is_pointer()).order_by("created_at", "id").values_list("id", "content", "pointer")
        )
    return [(pk, content) for pk, content, pointer in rows if not pointer]


def candidates(user_id: int) -> list[Truth]:
    """The user's live, unprotected truths that are not pointers, oldest first (read with
    ``CANDIDATE_FIELDS`` only)."""
    return list(
        Truth.objects.for_user(user_id).consolidatable(max_generation=app_settings.MAX_GENERATION)
        .alias(pointer=is_pointer()).filter(pointer=False).order_by("created_at", "id").only(*CANDIDATE_FIELDS)
    )


@dataclass(frozen=True, kw_only=True)
class Plan:
    """The stage's decision for one user: moves, the candidates looked at, model errors
    and refused entries; ``asked``: truths sent to the model in ``calls`` calls (0: it was
    not asked), ``remembered``: truths it was not asked about again because their "keep"
    is remembered (``answers``)."""

    moves: list[Move]
    examined: int
    errors: list[str]
    refused: list[dict[str, Any]]
    asked: int = 0
    calls: int = 0
    remembered: int = 0
    #: Truths not asked about: the run's budget reached the stage's ceiling (``budget``).
    deferred: int = 0

    def asked_head(self) -> dict[str, int]:
        """What the model was asked, for the stage's findings."""
        return {"asked": self.asked, "calls": self.calls, "remembered": self.remembered, "deferred": self.deferred}


#: Why a truth the model did not choose is left as it is (its remembered answer).
NOT_CHOSEN = "not chosen for a note by the model"


def choose_moves(
    *, run: ConsolidationRun, user_id: int, client: Any | None, rows: Sequence[tuple[int, str, Any]] | None = None
) -> Plan:
    """Which truths to relocate (see the module docstring); writes nothing but the run's
    model-spend counters and the remembered answers (``answers``): a truth the model left
    out is not asked about again until its text, the prompt or the model changes. A failed
    model call leaves the rule's decision. ``rows``:
    ``(id, content, pointer)`` of the user's consolidatable truths in (created_at, id) order,
    if the caller read them (the rule alone then reads no truth but the moves)."""
    min_chars = int(app_settings.RELOCATE_MIN_CHARS)
    if client is None:
        # The rule alone: the texts are enough; truths are built for the moves only.
        candidates_ = _candidate_rows(user_id, rows)
        ruled = {pk: why for pk, content in candidates_ if (why := is_reference_heavy(content, min_chars=min_chars))}
        moving = Truth.all_objects.filter(pk__in=list(ruled)).only(*CANDIDATE_FIELDS).in_bulk() if ruled else {}
        return Plan(moves=[rule_move(moving[pk], why) for pk, why in ruled.items()], examined=len(candidates_),
                    errors=[], refused=[])
    truths = candidates(user_id)
    by_rule = {t.pk: why for t in truths if (why := is_reference_heavy(t.content, min_chars=min_chars))}
    half = min_chars // 2
    offered = [t for t in truths if t.pk in by_rule or len(t.content) >= half]
    identity: dict[str, Any] = {"stage": answers.RELOCATE, "user_id": user_id,
                                "model": str(getattr(client, "model", "") or ""),
                                "prompt_version": prompts.RELOCATE_PROMPT_VERSION}
    kept = answers.remembered(**identity, contents=[t.content for t in offered])
    asking = [t for t in offered if t.content not in kept]
    if not asking:
        return Plan(moves=[], examined=len(truths), errors=[], refused=[], remembered=len(offered))
    if not budget.may_call(run, "relocate", client):
        # Left as they are, for a later pass (not the rule's decision: the model was not asked).
        return Plan(moves=[], examined=len(truths), errors=[], refused=[], remembered=len(offered) - len(asking),
                    deferred=len(asking))
    aliases = {f"r{i}": t for i, t in enumerate(asking, start=1)}
    asked = {"asked": len(asking), "calls": 1, "remembered": len(offered) - len(asking)}
    data = {"candidates": [{"id": a, "content": t.content} for a, t in aliases.items()]}
    try:
        (items, refused), spend = client.ask_json(
            prompts.messages_for(prompts.RELOCATE_SYSTEM, data),
            lambda raw: prompts.parse_relocation(raw, offered=set(aliases)),
        )
    except (JudgeResponseInvalid, JudgeUnavailable, JudgeRateLimited) as exc:
        ConsolidationRun.objects.filter(pk=run.pk).add_spend(exc.spend)
        moves = [rule_move(t, by_rule[t.pk]) for t in asking if t.pk in by_rule]
        return Plan(moves=moves, examined=len(truths), errors=[f"model call failed, the rule decided: {exc}"],
                    refused=[], **asked)
    ConsolidationRun.objects.filter(pk=run.pk).add_spend(spend)
    moves = [Move(truth=aliases[i.id], title=i.title, summary=i.summary, reason=i.reason or "classified by the model")
             for i in items]
    # A truth the model left out is its "keep", remembered; one named in a refused entry is asked again.
    named = {i.id for i in items} | {str(r.entry.get("id")) for r in refused}
    answers.remember(**identity, answers={t.content: NOT_CHOSEN for a, t in aliases.items() if a not in named})
    return Plan(moves=moves, examined=len(truths), errors=[],
                refused=[{"entry": r.entry, "why": r.why} for r in refused], **asked)


def _slug(user_id: int, title: str) -> str:
    base = slugify(title)[:60].strip("-") or "note"
    taken = set(Note.objects.filter(user_id=user_id, slug__startswith=base).values_list("slug", flat=True))
    slug, n = base, 2
    while slug in taken:
        slug, n = f"{base}-{n}", n + 1
    return slug


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 3}


def note_body(*, title: str, content: str, links: Sequence[str]) -> str:
    """The note's markdown: title, the truth's text, ``## Connections`` of wikilinks."""
    connections = "\n".join(f"- [[{slug}]]" for slug in links) or "- (none yet)"
    return f"# {title}\n\n{content.strip()}\n\n## Connections\n\n{connections}\n"


def _retire(truth: Truth, pointer: Truth, *, now: Any) -> None:
    """Retire ``truth`` (locked by the caller) with reason ``relocated`` into ``pointer``.

    Raises ``RelocationConflict`` when it changed meanwhile; the caller's transaction
    then rolls back the note and the pointer too.
    """
    updated = Truth.all_objects.filter(pk=truth.pk, retired_at__isnull=True, content=truth.content).update(
        retired_at=now, retired_reason=RetiredReason.RELOCATED, superseded_by=pointer
    )
    if updated != 1:
        raise RelocationConflict(CHANGED.format(truth=truth.pk))
    truth.retired_at, truth.retired_reason, truth.superseded_by = now, RetiredReason.RELOCATED, pointer


class RelocationConflict(Exception):
    """The truth changed between the plan and the write (nothing was written)."""


def relocate(*, move: Move, run: ConsolidationRun | None) -> tuple[Note, Truth]:
    """Write the note, the pointer, and retire the truth: one transaction, in that order.

    Raises ``RelocationConflict`` (or whatever a step raises) with nothing written when
    the truth is no longer live and unprotected or any step fails.
    """
    truth = move.truth
    with transaction.atomic():
        locked = Truth.all_objects.select_for_update().get(pk=truth.pk)
        if locked.retired_at is not None or locked.is_protected(max_generation=app_settings.MAX_GENERATION):
            raise RelocationConflict(CHANGED.format(truth=truth.pk))
        words = _words(move.title)
        related = [n.slug for n in Note.objects.filter(user_id=truth.user_id).order_by("slug")
                   if words & _words(n.title)]
        slug = _slug(truth.user_id, move.title)
        note = Note.objects.create(
            user_id=truth.user_id, slug=slug, title=move.title,
            body=note_body(title=move.title, content=locked.content, links=related), run=run,
        )
        note.source_truths.add(locked)
        line = move.summary if len(move.summary) <= POINTER_LINE else move.summary[: POINTER_LINE - 3] + "..."
        pointer = Truth.all_objects.create(
            user_id=truth.user_id, content=POINTER.format(slug=slug, line=line), origin=Origin.CONSOLIDATED,
            kind=locked.kind, pinned=True, generation=locked.generation, score=locked.score,
            corroborations=locked.corroborations, source=f"note:{slug}", tags=[*(locked.tags or []), POINTER_TAG],
            relevance=locked.relevance, access_count=locked.access_count, last_accessed=locked.last_accessed,
            validated=locked.validated,
        )
        _retire(locked, pointer, now=timezone.now())
        LineageEvent.objects.create(action=LineageEvent.Action.RELOCATE, source=locked, result=pointer,
                                    reason=move.reason, actor=ACTOR)
        if run is not None:
            ConsolidationRun.objects.filter(pk=run.pk).update(retired=F("retired") + 1)
        truth_events.record_changes(
            [
                truth_events.Change(truth=pointer, action=truth_events.CREATED, reason=f"pointer to note [[{slug}]]"),
                truth_events.Change(truth=locked, action=truth_events.RETIRED,
                                    reason=f"relocated: to note [[{slug}]]: {move.reason}"),
            ],
            run=run, actor=ACTOR,
        )
    return note, pointer


def relocated_pair(truth: Truth) -> tuple[Truth, Truth] | None:
    """``(relocated truth, pointer)`` when ``truth`` is either, live pointer; else None."""
    if truth.retired_reason == RetiredReason.RELOCATED and truth.superseded_by_id is not None:
        pointer = Truth.all_objects.get(pk=truth.superseded_by_id)
        return truth, pointer
    if POINTER_TAG in (truth.tags or []) and truth.retired_at is None:
        original = Truth.all_objects.filter(superseded_by=truth, retired_reason=RetiredReason.RELOCATED).first()
        if original is not None:
            return original, truth
    return None


def undo_relocation(*, truth_id: int, actor: str, reason: str) -> tuple[Truth, Truth]:
    """Undo a relocation, named by the relocated truth or its pointer: the truth is live
    again, the pointer retired (reason ``undone``); the note stays (history). One
    transaction; one ``LineageEvent`` (undo) and ``TruthChange`` rows.

    Raises ``UndoRefused`` when there is no reason or ``truth_id`` is not part of a
    relocation still in force.
    """
    reason = reason.strip()
    if not reason:
        raise UndoRefused(UndoRefused.REASON_REQUIRED)
    with transaction.atomic():
        truth = Truth.all_objects.filter(pk=truth_id).first()
        pair = relocated_pair(truth) if truth is not None else None
        if pair is None:
            raise UndoRefused(NOT_RELOCATED.format(truth=truth_id))
        ids = sorted(t.pk for t in pair)
        locked = {t.pk: t for t in Truth.all_objects.select_for_update().filter(pk__in=ids).order_by("pk")}
        original, pointer = locked[pair[0].pk], locked[pair[1].pk]
        if original.superseded_by_id != pointer.pk or original.retired_reason != RetiredReason.RELOCATED \
                or pointer.retired_at is not None:
            raise UndoRefused(NOT_RELOCATED.format(truth=truth_id))
        now = timezone.now()
        Truth.all_objects.filter(pk=original.pk).update(retired_at=None, retired_reason="", superseded_by=None)
        Truth.all_objects.filter(pk=pointer.pk).update(retired_at=now, retired_reason=RetiredReason.UNDONE)
        original.retired_at, original.retired_reason, original.superseded_by = None, "", None
        pointer.retired_at, pointer.retired_reason = now, RetiredReason.UNDONE
        LineageEvent.objects.create(action=LineageEvent.Action.UNDO, source=pointer, result=original, reason=reason,
                                    actor=actor)
        truth_events.record_changes(
            [
                truth_events.Change(truth=original, action=truth_events.RESTORED, reason=reason),
                truth_events.Change(truth=pointer, action=truth_events.UNDONE, reason=reason),
            ],
            actor=actor,
        )
    logger.info("relocation of truth %s undone by %s", original.pk, actor)
    return original, pointer
