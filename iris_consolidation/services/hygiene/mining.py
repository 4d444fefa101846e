"""The mine stage (rho's session mining): new truths from a user's own session messages.

Per user and pass:

1. **Window**: messages written in ``[since, until)``: ``since`` is the run's
   ``--since`` start (``last``: the last successful run's checkpoint, or
   ``IRIS_CONSOLIDATION_DAYS_FALLBACK`` days back), for a default (cursor) run the
   last checkpoint or the fallback, nothing for ``--full``; ``until`` is the run's
   snapshot time. Sessions with at least one of the user's own messages in it are
   analysed; others' messages are context only.
2. **Extraction**: with a model (the run's judge is the LLM judge), one call per session
   (up to ``IRIS_CONSOLIDATION_MINING_CONCURRENCY`` at once) through the judge's litellm client
   (mining contract in docs/llm.md, as quoted data): the session's messages, how the user's
   truths name the person (``subject_of``: "Andrew", or none) and the user's stored truths
   nearest to each of the person's messages (``novelty.known_for``, at most
   ``IRIS_CONSOLIDATION_MINING_KNOWN_TRUTHS``). The model proposes only what is new or
   changed, in the stored truths' style, and marks a proposal that makes a stored truth no
   longer true with ``changes`` (that truth). Offline, the conservative rule extractor
   (``extraction.py``: explicit first-person statements and corrections, high confidence),
   its text written in the same style (``in_style``). A model's truth whose evidence names
   another's message, or whose ``changes`` names a truth not offered, is refused.
3. **Confidence policy**: ``high`` is added; ``medium`` only with
   ``IRIS_CONSOLIDATION_MINING_CONFIDENCE=medium``; ``low`` never.
4. **Dedupe** (``_decide``), newest candidate first: a truth whose normalised text the user
   already has (live or retired) or a newer candidate has, or that restates one of its
   ``COMPARED`` nearest live truths, is skipped with the reason. Restates: cosine
   similarity >= ``IRIS_CONSOLIDATION_MINING_DUPLICATE_SIMILARITY``, or every content word
   of it in that truth, with its numbers and negations (``restated``; the person's name left
   out: "Has four dogs" restates "Andrew has four dogs", at cosine 0.69). A change is not
   compared with the truth it changes: the pass asks the judge about the two as a pair
   (``with_changes``), so the judge, the validator and the second look decide the supersede.
   With a model, the **novelty check** (``recheck``): a proposal with a near stored truth
   its mining call did not offer, and every carried one, is shown beside its nearest live
   truths in one more call per user and pass; one that restates a truth is skipped, one
   that changes a truth is judged beside it; what the check could not answer is carried.
5. **Cap**: at most ``IRIS_CONSOLIDATION_MAX_NEW_TRUTHS`` added per user per pass, the most
   recent sessions' first; the rest are skipped ("cap reached"), marked ``carry`` in the
   findings, and proposed again at the user's next pass (``carried``: no mining call, the
   novelty check's) until added or found known.
6. **Write** (apply mode, real runs): origin ``promoted``, ``source`` ``session:<id>``,
   ``evidence`` the message ids, ``created_at`` the last evidence message's time, the
   embedding made here; one ``TruthChange`` (created) each with the run, naming the truth a
   change replaces; one transaction.

Nothing here retires a truth. The findings list every candidate, added or skipped with
its reason, after one entry with the window and the sessions analysed.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from ... import run_settings
from ...conf import app_settings
from ...embeddings import Embedder
from ...exceptions import JudgeRateLimited, JudgeResponseInvalid, JudgeUnavailable, ModelCallError
from ...llm import hygiene as prompts
from ...models import (
    ChatSession,
    ConsolidationRun,
    MessageRole,
    Origin,
    SessionMessage,
    StageMode,
    StageResult,
    Truth,
)
from ..pipeline import truth_events
from . import budget, extraction, novelty, recheck

logger = logging.getLogger(__name__)

ACTOR = "hygiene:mine"
CONFIDENCE_RANK = {"high": 0, "medium": 1, "low": 2}
BAD_POLICY = "IRIS_CONSOLIDATION_MINING_CONFIDENCE must be high or medium; got {value!r}."

SKIP_CONFIDENCE = "confidence {confidence} is below the policy (IRIS_CONSOLIDATION_MINING_CONFIDENCE={policy})"
SKIP_KNOWN = "already known as truth #{truth}"
SKIP_RETIRED = "already stated by truth #{truth}, retired ({reason})"
SKIP_PASS = "stated twice in this pass"
SKIP_CAP = "cap reached (IRIS_CONSOLIDATION_MAX_NEW_TRUTHS={cap}); proposed again at the next pass"
SKIP_MODEL = "model reply refused: {why}"
SESSION_FAILED = "session {session}: {error}"
NOT_ASKED = "not asked: the model rate-limited this pass first; the next pass asks again"
CREATED = "mined from session:{session} ({confidence}): {reason}"
CHANGES = "; changes truth #{truth} (judged beside it)"
#: Stored truths a proposal is compared with, nearest first (``_restates``).
COMPARED = 5


@dataclass(frozen=True, kw_only=True)
class Window:
    """Messages at or after ``since`` (None: no lower bound) and before ``until``; ``how``
    says where ``since`` came from (full, checkpoint, fallback, duration, iso)."""

    since: datetime | None
    until: datetime
    how: str

    def as_dict(self) -> dict[str, Any]:
        return {"since": self.since.isoformat() if self.since else None, "until": self.until.isoformat(),
                "how": self.how}


@dataclass(kw_only=True)
class Candidate:
    """A truth found in one session, before the policy, dedupe and cap."""

    content: str
    kind: str
    confidence: str
    evidence: tuple[str, ...]
    reason: str
    session: str
    stated_at: datetime
    order: int
    skipped: str = ""
    vector: Any = None
    truth_id: int | None = None
    #: The stored truth this one replaces (the model's ``changes``), or None.
    changes: int | None = None
    #: Cosine similarity to ``changes`` (set by ``_decide``).
    changes_similarity: float = 0.0
    #: Skipped by the cap (or not checked): proposed again at the next pass (``carried``).
    carry: bool = False
    #: The stored truths its mining call offered the model (their ids), and whether it was
    #: carried from the user's last pass: what decides the novelty check (``recheck``).
    offered: frozenset[int] = frozenset()
    carried: bool = False

    def finding(self, *, added: bool, written: bool) -> dict[str, Any]:
        found: dict[str, Any] = {
            "content": self.content, "kind": self.kind, "confidence": self.confidence, "session": self.session,
            "evidence": list(self.evidence), "reason": self.reason,
            "outcome": ("added" if written else "would add") if added else "skipped",
            "why": self.skipped, "truth_id": self.truth_id, "stated_at": self.stated_at.isoformat(),
        }
        if self.changes is not None:
            found.update(changes=self.changes, changes_similarity=round(self.changes_similarity, 4))
        if self.carry:
            found["carry"] = True
        return found


@dataclass(kw_only=True)
class MiningResult:
    """What the stage found for one user: the window, the sessions analysed, every
    candidate (added ones first in ``added``), model spend and per-session errors."""

    window: Window
    sessions: list[str] = field(default_factory=list)
    messages: int = 0
    added: list[Candidate] = field(default_factory=list)
    skipped: list[Candidate] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    extractor: str = "rules"
    #: Sessions left for a later pass: the run's budget reached mining's ceiling (``budget``).
    deferred: list[str] = field(default_factory=list)
    #: Novelty check calls made (``recheck``).
    checks: int = 0

    def findings(self, *, written: bool) -> list[dict[str, Any]]:
        head = {"window": self.window.as_dict(), "sessions": self.sessions, "messages": self.messages,
                "extractor": self.extractor, "errors": self.errors, "deferred": len(self.deferred),
                "deferred_sessions": self.deferred, "checks": self.checks}
        skipped = sorted(self.skipped, key=lambda c: not c.carry)  # carried first: never cut by MAX_FINDINGS
        return [head, *(c.finding(added=True, written=written) for c in self.added),
                *(c.finding(added=False, written=written) for c in skipped)]


def window_of(run: ConsolidationRun, *, now: datetime | None = None) -> Window:
    """The run's mining window (see the module docstring)."""
    until = run.window_until or now or timezone.now()
    if run.window_mode == "full":
        return Window(since=None, until=until, how="full")
    if run.window_since is not None:
        return Window(since=run.window_since, until=until, how=run.window_mode or "iso")
    if run.previous_checkpoint is not None:
        return Window(since=run.previous_checkpoint, until=until, how="checkpoint")
    return Window(since=until - timedelta(days=float(app_settings.DAYS_FALLBACK)), until=until, how="fallback")


def _in_window(window: Window) -> dict[str, Any]:
    bounds: dict[str, Any] = {"at__lt": window.until}
    if window.since is not None:
        bounds["at__gte"] = window.since
    return bounds


def user_ids_to_mine(run: ConsolidationRun) -> list[int]:
    """Users with at least one of their own messages in the run's window, or with
    candidates the cap skipped at their last pass (``users_with_carried``), the run's user
    filter applied, ascending."""
    window = window_of(run)
    messages = SessionMessage.objects.filter(role=MessageRole.USER, **_in_window(window))
    if run.user_filter_id is not None:
        messages = messages.filter(session__user_id=run.user_filter_id)
    carry = novelty.users_with_carried(None if run.user_filter_id is None else [run.user_filter_id])
    return sorted(set(messages.values_list("session__user_id", flat=True).distinct()) | carry)


def _policy() -> str:
    value = str(app_settings.MINING_CONFIDENCE).strip().lower()
    if value not in ("high", "medium"):
        raise ImproperlyConfigured(BAD_POLICY.format(value=value))
    return value


def normalise(text: str) -> str:
    """Lower case, punctuation removed, spaces collapsed: what "the same text" means here."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _message_key(message: SessionMessage) -> str:
    return message.external_id or f"#{message.pk}"


def _sessions(user_id: int, window: Window) -> list[tuple[ChatSession, list[SessionMessage]]]:
    """The user's sessions with an own message in the window, with their messages in it."""
    rows = (
        SessionMessage.objects.filter(session__user_id=user_id, **_in_window(window))
        .select_related("session").order_by("session__started_at", "session_id", "position")
    )
    grouped: dict[int, tuple[ChatSession, list[SessionMessage]]] = {}
    for message in rows:
        grouped.setdefault(message.session_id, (message.session, []))[1].append(message)
    return [(s, msgs) for s, msgs in grouped.values() if any(m.role == MessageRole.USER for m in msgs)]


def _rule_candidates(
    session: ChatSession, messages: list[SessionMessage], start: int, subject: str | None
) -> list[Candidate]:
    own = [m for m in messages if m.role == MessageRole.USER]
    by_key = {_message_key(m): m for m in own}
    found = extraction.extract([(_message_key(m), m.content) for m in own])
    return [
        Candidate(content=novelty.in_style(e.content, subject), kind=e.kind, confidence=e.confidence,
                  evidence=e.evidence, reason=e.reason, session=session.external_id,
                  stated_at=max(by_key[k].at for k in e.evidence), order=start + i)
        for i, e in enumerate(found)
    ]


def mining_request(
    session: ChatSession, messages: Sequence[SessionMessage], known: Sequence[Truth], subject: str | None = None
) -> tuple[dict[str, Any], dict[str, SessionMessage]]:
    """The mining call's data (docs/llm.md's contract) and its message aliases (m1, m2, ...).
    ``known`` truths are k1, k2, ... in order, each with the month it was stated; ``subject``
    is how the user's truths name the person (``subject_of``)."""
    aliases = {f"m{i}": m for i, m in enumerate(messages, start=1)}
    data = {
        "session": {
            "id": "s1",
            "started_at": session.started_at.isoformat(),
            "messages": [{"id": a, "role": m.role, "content": m.content} for a, m in aliases.items()],
        },
        "subject": subject,
        "known": [{"id": f"k{i}", "content": t.content, "stated": t.created_at.strftime("%Y-%m")}
                  for i, t in enumerate(known, start=1)],
    }
    return data, aliases


@dataclass(kw_only=True)
class _Call:
    """One session's mining call: prepared in the pass's thread (its reads), made in any
    (``_ask_all``). ``outcome``: ``(reply, spend)``, the ``ModelCallError`` of its last
    attempt, ``DEFERRED`` (the run's budget) or None (not asked: the provider rate-limited
    the pass first); ``spends``: every attempt's spend, for the run."""

    session: ChatSession
    messages: list[SessionMessage]
    aliases: dict[str, SessionMessage]
    request: list[dict[str, Any]]
    own_ids: set[str]
    #: The known truths offered, by alias (k1, k2, ...): what a reply's ``changes`` may name.
    known: dict[str, Truth] = field(default_factory=dict)
    outcome: Any = None
    spends: list[Any] = field(default_factory=list)


#: ``_Call.outcome`` of a session the run's budget left for a later pass.
DEFERRED = "deferred"


def _prepare(
    *, user_id: int, sessions: list[tuple[ChatSession, list[SessionMessage]]], embedder: Embedder
) -> list[_Call]:
    """Each session's request (docs/llm.md's mining contract): its messages, how the user's
    truths name the person (``subject_of``) and the user's known truths nearest to each of
    the person's messages in it (``novelty.known_for``; one embedding batch for the pass)."""
    own = [[m.content for m in messages if m.role == MessageRole.USER] for _, messages in sessions]
    flat = [text for texts in own for text in texts]
    vectors = list(embedder.embed(flat)) if flat else []
    subject = novelty.user_subject(user_id)
    limit = int(app_settings.MINING_KNOWN_TRUTHS)
    calls, at = [], 0
    for (session, messages), texts in zip(sessions, own, strict=True):
        known = novelty.known_for(user_id, vectors[at: at + len(texts)], limit)
        at += len(texts)
        data, aliases = mining_request(session, messages, known, subject)
        calls.append(_Call(session=session, messages=messages, aliases=aliases,
                           request=prompts.messages_for(prompts.MINING_SYSTEM, data),
                           own_ids={a for a, m in aliases.items() if m.role == MessageRole.USER},
                           known={f"k{i}": t for i, t in enumerate(known, start=1)}))
    return calls


def _ask(client: Any, call: _Call) -> None:
    """Make ``call`` once (no database access: it may run in a worker thread)."""
    try:
        call.outcome = client.ask_json(
            call.request,
            lambda raw: prompts.parse_mining(raw, user_message_ids=call.own_ids, known_ids=set(call.known)),
        )
        call.spends.append(call.outcome[1])
    except (JudgeResponseInvalid, JudgeUnavailable) as exc:
        call.outcome = exc
        call.spends.append(exc.spend)


def _ask_all(*, run: ConsolidationRun, client: Any, calls: list[_Call]) -> None:
    """Make the user's mining calls: up to ``MINING_CONCURRENCY`` at once (threads; the calls
    only wait on the model), so that a user's sessions fit one phase-1 task at a model's
    latency. One at a time under a cap (each call starts only below mining's ceiling:
    ``budget``, so the run ends within one call's price of its cap) and while a pass is
    forecast. After a 429 no further call starts. A call that failed in transport (a
    timeout, an unreachable model; not a 429) is asked again once, alone, after the others:
    never the user's whole pass (once such a retry fails too, no other is made)."""
    serial = run_settings.max_cost(run) is not None or not getattr(client, "concurrent", True)
    workers = 1 if serial else max(1, int(app_settings.MINING_CONCURRENCY))
    limited, spent = threading.Event(), threading.Event()

    def ask(call: _Call) -> None:
        if limited.is_set():
            return
        # The budget only grows spent: once mining's ceiling is reached, every later call waits.
        if serial and (spent.is_set() or not budget.may_call(run, "mine", client)):
            spent.set()
            call.outcome = DEFERRED
            return
        _ask(client, call)
        if serial:  # the next call's budget check reads the run's spend: record it now
            for spend in call.spends:
                ConsolidationRun.objects.filter(pk=run.pk).add_spend(spend)
            call.spends.clear()
        if isinstance(call.outcome, JudgeRateLimited):
            limited.set()

    if workers == 1:
        for call in calls:
            ask(call)
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="iris-mine") as pool:
            list(pool.map(ask, calls))
    for call in calls:
        if isinstance(call.outcome, JudgeUnavailable) and not isinstance(call.outcome, JudgeRateLimited):
            logger.info("run %s: mining session %s again, alone: %s", run.pk, call.session.external_id, call.outcome)
            ask(call)
            if isinstance(call.outcome, JudgeUnavailable):
                break  # failed twice: the model is down; the other failed sessions wait for the next pass


def _model_candidates(*, call: _Call, start: int, result: MiningResult) -> list[Candidate]:
    """The candidates of a call's reply; its refused entries go to ``result.skipped``."""
    session, aliases = call.session, call.aliases
    items, rejected = call.outcome[0]
    for item in rejected:
        result.skipped.append(
            Candidate(content=prompts._line(item.entry.get("content")) or "-", kind="", confidence="",
                      evidence=(), reason="", session=session.external_id, stated_at=session.started_at,
                      order=start, skipped=SKIP_MODEL.format(why=item.why))
        )
    return [
        Candidate(content=i.content, kind=i.kind, confidence=i.confidence,
                  evidence=tuple(_message_key(aliases[a]) for a in i.evidence), reason=i.reason,
                  session=session.external_id, stated_at=max(aliases[a].at for a in i.evidence), order=start + n,
                  changes=call.known[i.changes].pk if i.changes else None,
                  offered=frozenset(t.pk for t in call.known.values()))
        for n, i in enumerate(items)
    ]


def find(
    *, run: ConsolidationRun, user_id: int, embedder: Embedder, client: Any | None, has_messages: bool = True
) -> MiningResult:
    """Steps 1-5 of the module docstring for one user; writes nothing but the run's
    model-spend counters. ``client``: an object with ``ask_json`` (the LLM judge), or
    None for the offline extractor. The model's calls run concurrently (``_ask_all``);
    a session whose call fails (after one more try alone for a transport error) is
    recorded in ``errors`` and skipped; once the provider rate-limits the pass, the
    sessions not yet asked wait for the next pass, and so do they once the run's budget
    reaches mining's ceiling (``budget``; listed in ``deferred``). ``has_messages`` False:
    the caller knows the user has no session message at all, so none is read (the result
    of no session). What the cap skipped at the user's last pass is proposed again
    (``carried``), with this pass's candidates."""
    window = window_of(run)
    policy = _policy()
    result = MiningResult(window=window, extractor="llm" if client is not None else "rules")
    candidates: list[Candidate] = []
    sessions = _sessions(user_id, window) if has_messages else []
    if client is None:
        subject = novelty.user_subject(user_id) if sessions else None
        for session, messages in sessions:
            result.sessions.append(session.external_id)
            result.messages += sum(1 for m in messages if m.role == MessageRole.USER)
            candidates.extend(_rule_candidates(session, messages, len(candidates), subject))
    elif sessions and not budget.may_call(run, "mine", client):
        result.deferred = [session.external_id for session, _ in sessions]
    elif sessions:
        calls = _prepare(user_id=user_id, sessions=sessions, embedder=embedder)
        _ask_all(run=run, client=client, calls=calls)
        for call in calls:
            for spend in call.spends:
                ConsolidationRun.objects.filter(pk=run.pk).add_spend(spend)
            if call.outcome == DEFERRED:
                result.deferred.append(call.session.external_id)
                continue
            result.sessions.append(call.session.external_id)
            result.messages += len(call.own_ids)
            if call.outcome is None:
                result.errors.append(SESSION_FAILED.format(session=call.session.external_id, error=NOT_ASKED))
            elif isinstance(call.outcome, ModelCallError):
                result.errors.append(SESSION_FAILED.format(session=call.session.external_id, error=call.outcome))
            else:
                candidates.extend(_model_candidates(call=call, start=len(candidates), result=result))
    if has_messages:  # what the cap skipped came from the user's sessions: none, nothing to carry
        candidates.extend(carried(run=run, user_id=user_id, start=len(candidates)))
    _decide(user_id=user_id, candidates=candidates, policy=policy, embedder=embedder, result=result, run=run,
            client=client)
    return result


def _newest_first(c: Candidate) -> tuple[float, int, int]:
    return -c.stated_at.timestamp(), CONFIDENCE_RANK.get(c.confidence, 3), c.order


def _decide(
    *, user_id: int, candidates: list[Candidate], policy: str, embedder: Embedder, result: MiningResult,
    run: ConsolidationRun, client: Any | None,
) -> None:
    """Confidence policy, dedupe and cap over ``candidates``, into ``result``.

    Newest first (the latest session's statement of a fact is its current state; the cap
    keeps the most recent sessions' facts). Skipped: below the policy; the same normalised
    text as a truth of the user (live or retired) or as a newer candidate; a restatement of
    one of the ``COMPARED`` nearest live truths (``novelty.restates``); with a model
    (``client``), one the novelty check finds restating a stored truth (``recheck``: what it
    could not check is carried). A candidate that changes a truth (``changes``) is compared
    with the others, not with the truth it changes: the judge decides that pair
    (``with_changes``); if that truth is no longer live, it is new."""
    allowed = ("high",) if policy == "high" else ("high", "medium")
    ordered = sorted(candidates, key=_newest_first)
    existing: dict[str, Truth] = {}
    # Nothing mined (no session in the window, the usual case): no need to read the user's truths.
    if ordered:
        for truth in Truth.all_objects.for_user(user_id).only("id", "content", "retired_at", "retired_reason"):
            existing.setdefault(normalise(truth.content), truth)
    seen: set[str] = set()
    keep: list[Candidate] = []
    for c in ordered:
        key = normalise(c.content)
        if c.confidence not in allowed:
            c.skipped = SKIP_CONFIDENCE.format(confidence=c.confidence, policy=policy)
        elif key in existing:
            truth = existing[key]
            c.skipped = (SKIP_KNOWN.format(truth=truth.pk) if truth.retired_at is None
                         else SKIP_RETIRED.format(truth=truth.pk, reason=truth.retired_reason))
        elif key in seen:
            c.skipped = SKIP_PASS
        else:
            seen.add(key)
            keep.append(c)
            continue
        result.skipped.append(c)
    pending = _against_stored(user_id=user_id, keep=keep, embedder=embedder, result=result,
                              checking=client is not None) if keep else []
    if pending:
        kept, unchecked, result.checks = recheck.check(run=run, client=client, pending=pending,
                                                       subject=novelty.user_subject(user_id))
        result.skipped += unchecked
        result.added = sorted(result.added + kept, key=_newest_first)
    cap = int(app_settings.MAX_NEW_TRUTHS)
    for c in result.added[cap:]:
        c.skipped = SKIP_CAP.format(cap=cap)
        c.carry = True
        result.skipped.append(c)
    # Written (and listed) in the order they were stated.
    result.added = sorted(result.added[:cap], key=lambda c: (c.stated_at, c.order))


def _against_stored(
    *, user_id: int, keep: list[Candidate], embedder: Embedder, result: MiningResult, checking: bool
) -> list[recheck.Pending]:
    """Each of ``keep`` (already past the policy and the exact-text checks) into
    ``result.added``, or ``result.skipped`` when it restates one of its ``COMPARED``
    nearest stored truths (``novelty.restates``), or, with ``checking``, into the returned
    list when the novelty check must see it (``recheck.needs_check``: its nearest live
    truths are returned with it); a ``changes`` naming no live truth is dropped."""
    live = set(Truth.objects.filter(pk__in=[c.changes for c in keep if c.changes]).values_list("pk", flat=True))
    subject = novelty.user_subject(user_id)
    vectors = embedder.embed([c.content for c in keep])
    pending: list[recheck.Pending] = []
    for c, vector in zip(keep, vectors, strict=True):
        c.vector = vector
        if c.changes not in live:
            c.changes = None
        nearest = novelty.nearest(user_id, vector, COMPARED, retired=True)
        for truth in nearest:
            if truth.pk == c.changes:
                c.changes_similarity = 1.0 - float(truth.distance)  # type: ignore[attr-defined]  # nearest()'s annotation
        # A retired truth counts too (a superseded habit is not revived), unless this one
        # declares a change: then it may state an old value again ("moved back to Lisbon").
        compared = [t for t in nearest if t.pk != c.changes and (t.retired_at is None or c.changes is None)]
        why = novelty.restates(c.content, compared, subject)
        stored = [t for t in nearest if t.retired_at is None]
        if why:
            c.skipped = why
            result.skipped.append(c)
        elif checking and recheck.needs_check(stored=stored, offered=c.offered, carried=c.carried):
            pending.append(recheck.Pending(candidate=c, stored=stored))
        else:
            result.added.append(c)
    return pending


def carried(*, run: ConsolidationRun, user_id: int, start: int) -> list[Candidate]:
    """What the cap skipped at the user's last real pass (before ``run``): the findings of
    its mine result marked ``carry``, as candidates again (their session, evidence, time
    and ``changes``), so the cap never drops a fact for good. One query."""
    last = (StageResult.objects.filter(stage="mine", user_id=user_id, run__dry_run=False, mode=StageMode.APPLY)
            .exclude(run=run).order_by("-id").values_list("findings", flat=True).first())
    found: list[Candidate] = []
    for entry in last or []:
        if entry.get("carry") and entry.get("content") and entry.get("stated_at"):
            found.append(Candidate(
                content=entry["content"], kind=entry.get("kind") or "fact", confidence=entry.get("confidence") or "",
                evidence=tuple(entry.get("evidence") or ()), reason=entry.get("reason") or "",
                session=entry.get("session") or "", stated_at=datetime.fromisoformat(entry["stated_at"]),
                order=start + len(found), changes=entry.get("changes"), carried=True,
            ))
    return found


def write(*, run: ConsolidationRun, user_id: int, result: MiningResult, embedder: Embedder) -> list[Truth]:
    """Create the added truths (step 6), with their audit rows; call inside the stage's
    transaction. Returns them."""
    truths = [
        Truth(
            user_id=user_id, content=c.content, kind=c.kind or "fact", origin=Origin.PROMOTED,
            source=f"session:{c.session}", evidence=list(c.evidence), created_at=c.stated_at,
            embedding=c.vector, embedding_model=embedder.model_name,
        )
        for c in result.added
    ]
    Truth.all_objects.bulk_create(truths)
    for c, truth in zip(result.added, truths, strict=True):
        c.truth_id = truth.pk
    truth_events.record_changes(
        [
            truth_events.Change(truth=t, action=truth_events.CREATED,
                                reason=CREATED.format(session=c.session, confidence=c.confidence, reason=c.reason)
                                + (CHANGES.format(truth=c.changes) if c.changes else ""))
            for c, t in zip(result.added, truths, strict=True)
        ],
        run=run, actor=ACTOR,
    )
    return truths
