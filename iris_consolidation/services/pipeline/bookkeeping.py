"""Merge bookkeeping of the hygiene fields (loopctl's merge_cluster), for every merge.

What a merge's result holds, from its sources:
- ``tags``: the union, in first-seen order (sources oldest first);
- ``access_count``: the sum;
- ``validated``: true if any source was;
- ``relevance``: the highest source relevance + 0.1 per retired duplicate, capped at 1.0
  (a merge of n sources into a new truth retires n - 1 duplicates of it);
- ``last_accessed``: the freshest (latest) of the sources';
- ``evidence``: every source's message ids once, in first-seen order (sources oldest
  first), so where a mined fact came from survives its merges.
A merge's new truth takes ``merged_kind``: the kind most of its sources have; on a tie,
a kind other than the default ``fact`` (it says more: "preference", "instruction"), then
the kind of the newest source among the tied ones. Never the order of a set, which follows
``PYTHONHASHSEED`` and flipped a fact/preference tie from one run to the next.
``last_decayed`` is the latest too, so decay does not count twice the time the sources
already decayed over; ``held_since`` is the earliest (the installation held the fact since
its first source came), so a merge does not restart the decay clock of what it merges. Called
by ``merging`` inside its transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...models import Truth

#: Relevance a merge adds per retired duplicate (loopctl's merge_cluster).
RELEVANCE_PER_DUPLICATE = 0.1


def _latest(values: Sequence[Any]) -> Any:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def union_tags(sources: Sequence[Truth]) -> list[str]:
    """Every source's tags once, in first-seen order (sources oldest first)."""
    tags: list[str] = []
    for source in sorted(sources, key=lambda t: (t.created_at, t.pk or 0)):
        for tag in source.tags or ():
            if tag not in tags:
                tags.append(tag)
    return tags


def union_evidence(sources: Sequence[Truth]) -> list[str]:
    """Every source's evidence (message ids) once, in first-seen order (sources oldest first)."""
    evidence: list[str] = []
    for source in sorted(sources, key=lambda t: (t.created_at, t.pk or 0)):
        for item in source.evidence or ():
            if item not in evidence:
                evidence.append(item)
    return evidence


#: The kind a truth has when nothing more specific was said (``Truth.kind``'s default).
DEFAULT_KIND = "fact"


def merged_kind(sources: Sequence[Truth]) -> str:
    """The kind of a merge's result (see the module docstring): the most common among
    ``sources``; a tie goes to a kind other than ``DEFAULT_KIND``, then to the newest
    source's kind (created_at, then id) among the tied ones."""
    counts: dict[str, int] = {}
    for source in sources:
        counts[source.kind] = counts.get(source.kind, 0) + 1
    top = max(counts.values())
    tied = {kind for kind, n in counts.items() if n == top}
    if len(tied) > 1:
        tied.discard(DEFAULT_KIND)
    newest = sorted((s for s in sources if s.kind in tied), key=lambda t: (t.created_at, t.pk or 0))
    return newest[-1].kind


def merged_fields(sources: Sequence[Truth], *, retired: int) -> dict[str, Any]:
    """The hygiene fields of a merge's result over ``sources`` (see the module docstring);
    ``retired`` is how many duplicates the merge retires beyond the one it stands for."""
    relevance = max(s.relevance for s in sources) + RELEVANCE_PER_DUPLICATE * max(0, retired)
    return {
        "tags": union_tags(sources),
        "access_count": sum(s.access_count for s in sources),
        "validated": any(s.validated for s in sources),
        "relevance": round(min(1.0, relevance), 12),
        "last_accessed": _latest([s.last_accessed for s in sources]),
        "last_decayed": _latest([s.last_decayed for s in sources]),
        "held_since": min(s.held_since for s in sources),
        "evidence": union_evidence(sources),
    }


def absorb(keeper: Truth, *, sources: Sequence[Truth], retired: int) -> None:
    """Give ``keeper`` (a protected member that survives the merge, in ``sources``) the
    merge's bookkeeping; its content and ``updated_at`` stay (a queryset update)."""
    fields = merged_fields(sources, retired=retired)
    # A protected truth never decays; the keeper stays the truth it was.
    fields.pop("last_decayed")
    fields.pop("held_since")
    for name, value in fields.items():
        setattr(keeper, name, value)
    Truth.all_objects.filter(pk=keeper.pk).update(**fields)
