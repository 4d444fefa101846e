"""Prune (loopctl's consolidate): truths whose relevance or quality fell below a floor.

After decay and the merges, a consolidatable truth is a prune candidate when its
post-decay relevance, or its quality (``quality.py``), is below
``IRIS_CONSOLIDATION_PRUNE_FLOOR`` (0.05). Protected truths (pinned, of origin user or
agent, at the max generation) are never candidates: they are not selected, and
``retire.retire`` checks again under the row lock. The stage retires them with reason
``pruned`` in apply mode only (``stages.run_prune``); undo is ``retire.restore``.

The prune cap: one pass prunes at most ``IRIS_CONSOLIDATION_MAX_PRUNE_SHARE`` (10%) of
the user's live truths it examines, those it may retire (``run_settings.prune_allowance``:
``floor(share x examined)``; protected truths are not counted, so the cap is never more
than the share of all live truths). The
candidates are ranked lowest score first (the lower of relevance and quality), those
within the cap are pruned and the rest refused: left live and counted on the stage's
result (``refused``) and in its report (``share_text``), as the retirement cap's
refusals are. A floor, a decay setting or an import that puts most of a memory under
the floor thus loses at most a tenth of it a pass, and says so.
Writes nothing here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from ...conf import app_settings
from ...models import Truth
from ...quality import quality
from ...run_settings import prune_allowance
from . import decay


@dataclass(frozen=True, kw_only=True)
class PruneCandidate:
    """A truth below the floor, with the figures that put it there."""

    truth: Truth
    relevance: float
    quality: float

    def note(self) -> str:
        return f"relevance {self.relevance:.4f}, quality {self.quality:.4f} below the floor"


def find_candidates(
    *, user_id: int, now: datetime, relevance: Mapping[int, float] | None = None, floor: float | None = None
) -> tuple[int, list[PruneCandidate]]:
    """(truths examined, candidates) among ``user_id``'s consolidatable truths at ``now``.

    ``relevance`` overrides stored values (the decay stage's results in a dry run or in
    report mode, where nothing was written). ``floor`` defaults to the setting. One
    query; a candidate's ``truth`` carries the fields read (``_FIELDS``) and its user.
    """
    floor = float(app_settings.PRUNE_FLOOR if floor is None else floor)
    half_life = float(app_settings.HALF_LIFE_DAYS)
    overrides = relevance or {}
    rows = list(
        Truth.objects.for_user(user_id)
        .consolidatable(max_generation=app_settings.MAX_GENERATION)
        .order_by("created_at", "id")
        .values_list(*_FIELDS)
    )
    found = []
    # Rows, not model instances: a truth is built only for a candidate (few).
    for pk, content, stored, access_count, last_accessed, created_at, validated in rows:
        rel = overrides.get(pk, stored)
        score = quality(relevance=rel, access_count=access_count, last_used=last_accessed or created_at,
                        validated=validated, now=now, half_life_days=half_life)
        if rel < floor or score < floor:
            truth = Truth(id=pk, user_id=user_id, content=content, relevance=stored, access_count=access_count,
                          last_accessed=last_accessed, created_at=created_at, validated=validated)
            found.append(PruneCandidate(truth=truth, relevance=rel, quality=score))
    return len(rows), found


def within_cap(
    candidates: Sequence[PruneCandidate], *, live: int, share: float
) -> tuple[list[PruneCandidate], list[PruneCandidate]]:
    """(pruned, refused): ``candidates`` ranked lowest score first (the lower of relevance
    and quality, then the oldest id), the first ``prune_allowance(share, live)`` of them
    pruned, the rest refused by the cap."""
    ranked = sorted(candidates, key=lambda c: (min(c.relevance, c.quality), c.truth.pk))
    allowed = prune_allowance(share=share, live=live)
    return ranked[:allowed], ranked[allowed:]


def share_text(*, found: int, live: int, share: float, refused: int, pruned: int | None = None) -> str:
    """The prune count with its share of the live truths, and the cap when it refused some:
    ``"would prune 62 of 63 truths, 98%: above the cap of 10%, 56 refused"``; with
    ``pruned`` (apply mode) ``"pruned 6 of 63 truths, 10%; 56 more refused: above the cap of 10%"``.
    "" when nothing was found."""
    if not found:
        return ""
    cap = f"{share:.0%}"
    if pruned is None:
        text = f"would prune {found} of {live} truth{'s' if live != 1 else ''}, {_percent(found, live)}"
        return f"{text}: above the cap of {cap}, {refused} refused" if refused else f"{text} (cap {cap})"
    text = f"pruned {pruned} of {live} truth{'s' if live != 1 else ''}, {_percent(pruned, live)}"
    return f"{text}; {refused} more refused: above the cap of {cap}" if refused else f"{text} (cap {cap})"


def _percent(part: int, whole: int) -> str:
    """``part`` of ``whole`` as a whole percentage, never shown as 0% or 100% when it is not."""
    if not whole:
        return "0%"
    value = 100.0 * part / whole
    shown = round(value)
    if shown == 0 and part:
        return "<1%"
    if shown == 100 and part < whole:
        return ">99%"
    return f"{shown}%"


#: The columns ``find_candidates`` reads: what ``quality.quality_of`` reads, and the text.
_FIELDS = ("id", "content", "relevance", "access_count", "last_accessed", "created_at", "validated")


@dataclass(frozen=True, kw_only=True)
class PrunePreview:
    """What a pass at ``now`` would prune over ``users``: ``found`` candidates among
    ``examined`` truths, ``pruned`` within the cap, ``refused`` above it, and
    ``users_capped`` users held back by it."""

    users: int
    examined: int
    found: int
    pruned: int
    refused: int
    users_capped: int
    share: float

    def text(self) -> str:
        """The preview in words (``share_text`` with "would prune ... ; N would be pruned")."""
        if not self.found:
            return f"would prune nothing of {self.examined} truths ({self.users} users)"
        capped = (f"; {self.pruned} would be pruned, {self.users_capped} user{'s' if self.users_capped != 1 else ''}"
                  " held back by the cap" if self.refused else "")
        return share_text(found=self.found, live=self.examined, share=self.share, refused=self.refused) + capped


def preview(*, user_ids: Sequence[int], now: datetime, share: float, decay_on: bool) -> PrunePreview:
    """What the prune stage would do in a pass at ``now`` for ``user_ids`` with the prune
    cap ``share``, relevance decayed first when ``decay_on`` (as ``stages.run_prune``
    computes it). Reads only: two queries a user (decay's read, the candidates')."""
    examined = found = pruned = refused = capped = 0
    for user_id in user_ids:
        relevance = decay.decay_user(user_id=user_id, now=now, write=False).relevance if decay_on else None
        seen, candidates = find_candidates(user_id=user_id, now=now, relevance=relevance)
        within, above = within_cap(candidates, live=seen, share=share)
        examined += seen
        found += len(candidates)
        pruned += len(within)
        refused += len(above)
        capped += bool(above)
    return PrunePreview(users=len(user_ids), examined=examined, found=found, pruned=pruned, refused=refused,
                        users_capped=capped, share=share)
