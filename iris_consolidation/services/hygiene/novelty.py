"""What mining adds is new: written as the user's truths speak of the person (``subject_of``,
``in_style``), skipped when a stored truth already says it (``restates``, ``restated``), judged
beside the truth it changes (``with_changes``), and carried to the next pass when the cap
skipped it (``carried``, ``users_with_carried``); the stored truths the mining call is offered
(``known_for``) and those a proposal is compared with (``nearest``). Used by ``mining``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from uuid import UUID

import numpy as np
from django.db import transaction
from django.db.models import OuterRef, Subquery

from ...conf import app_settings
from ...models import StageMode, StageResult, Truth
from ...querysets import set_hnsw_search
from ...text import quantities, stems
from ...text.languages import LEXICON
from ...text.normalising import tokens
from ..pipeline.clustering import CandidateCluster


def nearest(user_id: int, vector: np.ndarray, limit: int, *, retired: bool = False) -> list[Truth]:
    """The user's ``limit`` live truths nearest to ``vector`` (with ``retired``: live or retired)."""
    truths = Truth.all_objects if retired else Truth.objects
    with transaction.atomic():
        set_hnsw_search(ef_search=int(app_settings.HNSW_EF_SEARCH))
        return list(truths.for_user(user_id).nearest(vector.tolist(), limit=limit))


#: Known truths taken per message of the person (nearest first) before the cap
#: ``IRIS_CONSOLIDATION_MINING_KNOWN_TRUTHS``: a session touches several topics, and the
#: twin of what one message says is near that message, not near the session as a whole.
KNOWN_PER_MESSAGE = 4


def known_for(user_id: int, vectors: Sequence[np.ndarray], limit: int) -> list[Truth]:
    """The user's truths nearest to each vector (``KNOWN_PER_MESSAGE`` each), round-robin
    so that every message's nearest come first, at most ``limit``; one transaction."""
    with transaction.atomic():
        set_hnsw_search(ef_search=int(app_settings.HNSW_EF_SEARCH))
        lists = [list(Truth.objects.for_user(user_id).nearest(v.tolist(), limit=KNOWN_PER_MESSAGE))
                 for v in vectors]
    chosen: dict[int, Truth] = {}
    for rank in range(KNOWN_PER_MESSAGE):
        for rows in lists:
            if rank < len(rows) and len(chosen) < limit:
                chosen.setdefault(rows[rank].pk, rows[rank])
    return list(chosen.values())


def in_style(content: str, subject: str | None) -> str:
    """A subject-less truth of the offline extractor ("Lives in Berlin", "Their favorite
    color is red") written as the user's truths name the person (``subject_of``):
    "Caroline lives in Berlin", "Caroline's favorite color is red"; unchanged without one."""
    if not subject or subject == "I" or not content:  # no verb is conjugated here: "I lives" would be wrong
        return content
    if content.startswith("Their "):
        return f"{subject}'s {content.removeprefix('Their ')}"
    return f"{subject} {content[0].lower()}{content[1:]}"


#: How many of the user's latest truths ``subject_of`` reads.
STYLE_SAMPLE = 400
#: Share of the user's truths that must begin with a word for ``subject_of`` to take it.
SUBJECT_SHARE = 0.3
#: First words that begin a sentence without naming the person ("Has two cats", "The
#: support group ..."); ``subject_of`` never takes one of them for the person's name.
_STARTERS = frozenset(
    "a an the this that these those his her their its my our your he she they it we you is are was were has "
    "have had does did do likes loves enjoys prefers wants works lives plans used can cannot will would "
    "not no after before when since as in on at for to from with and but or".split()
)


def subject_of(contents: Sequence[str]) -> str | None:
    """How the user's truths name the person: the capitalised first word (not a sentence
    starter such as "Has" or "The") that begins at least ``SUBJECT_SHARE`` of ``contents``,
    e.g. "Andrew" for "Andrew has four dogs" ("I" for first-person truths); None when no
    word does (the truths have no subject, "Has four dogs", or speak in many ways)."""
    firsts = [text.split(maxsplit=1)[0].strip(".,:;!?\"'") for text in contents if text.strip()]
    counts: dict[str, int] = {}
    for word in firsts:
        if word[:1].isupper() and word.lower() not in _STARTERS:
            counts[word] = counts.get(word, 0) + 1
    if not counts:
        return None
    word, count = max(counts.items(), key=lambda item: item[1])
    return word if count >= SUBJECT_SHARE * len(firsts) else None


def user_subject(user_id: int) -> str | None:
    """``subject_of`` the user's ``STYLE_SAMPLE`` latest live truths."""
    latest = Truth.objects.for_user(user_id).order_by("-created_at").values_list("content", flat=True)
    return subject_of(list(latest[:STYLE_SAMPLE]))


def restated(text: str, truth: str, *, subject: str | None = None) -> bool:
    """Whether ``truth`` says everything ``text`` says, by its words: every content stem
    of ``text`` (``text.stems.content_stems``, the person's name ``subject`` left out)
    has a word of its family in ``truth``, and ``text`` has at least one; its numbers and
    negations are all in ``truth``, and ``truth`` has no negation ``text`` lacks (a
    polarity change is not a restatement). "Has four dogs" / "Andrew has four dogs":
    True; "Has two dogs" / "Has three dogs": False."""
    skip = {subject.lower()} if subject else set()
    own = stems.content_stems(text, exclude=skip)
    if not own or stems.missing(own, stems.content_stems(truth, exclude=skip)):
        return False
    marks_text, marks_truth = _marks(text), _marks(truth)
    return marks_text[0] <= marks_truth[0] and marks_text[1] == marks_truth[1]


SKIP_NEAR = "near-duplicate of truth #{truth} (cosine similarity {similarity:.3f})"
SKIP_WORDS = "restates truth #{truth}: every word of it is there (cosine similarity {similarity:.3f})"
SKIP_WAS_RETIRED = ", retired ({reason})"


def restates(content: str, nearest: Sequence[Truth], subject: str | None) -> str:
    """Why ``content`` (a mined proposal) restates one of ``nearest`` (stored truths with
    ``distance``, nearest first; a retired one is named so), or "": cosine similarity at or
    above ``MINING_DUPLICATE_SIMILARITY``, or every content word of it in the truth
    (``restated``: stems, numbers and negations; the person's name left out)."""
    threshold = float(app_settings.MINING_DUPLICATE_SIMILARITY)
    for truth in nearest:
        similarity = 1.0 - float(truth.distance)  # type: ignore[attr-defined]  # nearest()'s annotation
        if similarity >= threshold:
            why = SKIP_NEAR.format(truth=truth.pk, similarity=similarity)
        elif restated(content, truth.content, subject=subject):
            why = SKIP_WORDS.format(truth=truth.pk, similarity=similarity)
        else:
            continue
        return why + (SKIP_WAS_RETIRED.format(reason=truth.retired_reason) if truth.retired_at is not None else "")
    return ""


def _marks(text: str) -> tuple[set[str], set[str]]:
    """The numbers of ``text`` by value (``quantities.values``: "4" and "four" are one) and
    its negations."""
    return quantities.values(text), {w for w in tokens(text) if w in LEXICON.negations or w in LEXICON.negative_verbs}


def users_with_carried(user_ids: Iterable[int] | None = None) -> set[int]:
    """Users whose last real mine result holds candidates the cap skipped (``carried``):
    the next pass mines them even without a session in its window. One query."""
    last = (StageResult.objects.filter(stage="mine", user_id=OuterRef("user_id"), run__dry_run=False,
                                       mode=StageMode.APPLY).order_by("-id").values("id")[:1])
    rows = StageResult.objects.filter(stage="mine", findings__contains=[{"carry": True}], id=Subquery(last))
    if user_ids is not None:
        rows = rows.filter(user_id__in=list(user_ids))
    return set(rows.values_list("user_id", flat=True))


def _changes_findings(findings: Sequence[dict]) -> list[dict]:
    """The findings of a mine result (its head first, skipped) of truths added as a change."""
    return [f for f in findings[1:] if f.get("outcome") == "added" and f.get("truth_id") and f.get("changes")]


def mined_changes(run_id: UUID, user_id: int) -> dict[int, int]:
    """``{mined truth id: id of the stored truth it changes}`` for what the run ``run_id``
    mined for ``user_id`` as a change (its mine ``StageResult``; empty when none): the judge
    is told which member a mined truth was read as changing (``MemberView.changes``)."""
    result = StageResult.objects.filter(run_id=run_id, user_id=user_id, stage="mine").first()
    return {int(f["truth_id"]): int(f["changes"]) for f in _changes_findings(result.findings if result else [])}


def with_changes(
    clusters: list[CandidateCluster], mine: StageResult | None, *, user_id: int
) -> list[CandidateCluster]:
    """``clusters`` (``CandidateCluster``) and, for each truth this pass mined as a change
    of a stored truth (``changes`` in ``mine``'s findings), the pair (new truth first, then
    the truth it changes) as one more group unless a group is that pair already, so the
    judge, the validator and the second look decide that supersede. Also when a larger group
    holds both: measured on LoCoMo, a judge shown "passed her adoption interviews" among ten
    of the person's truths kept "is researching adoption agencies" beside it. The change
    pairs come first, so they are decided before another group merges the changed truth away
    (on LoCoMo, "searching for a place to open his dance studio" was merged with a twin in
    the same pass and its change, the studio's opening, found it retired)."""
    findings = _changes_findings(mine.findings if mine is not None else [])
    pairs = [(f["truth_id"], f["changes"], float(f.get("changes_similarity") or 0.0)) for f in findings]
    wanted = {frozenset((new, old)) for new, old, _ in pairs}
    asked = {frozenset(c.member_ids) for c in clusters}
    extra = [
        CandidateCluster(user_id=user_id, member_ids=(new, old), similarities=(1.0, similarity))
        for new, old, similarity in pairs
        if frozenset((new, old)) not in asked
    ]
    first = [c for c in clusters if frozenset(c.member_ids) in wanted]
    return [*first, *extra, *(c for c in clusters if frozenset(c.member_ids) not in wanted)]
