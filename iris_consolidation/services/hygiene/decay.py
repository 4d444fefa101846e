"""Category-weighted time decay of relevance (loopctl's consolidate), idempotent over cadence.

For each live, consolidatable truth of a user, at the pass time ``now``:

    relevance = relevance x 0.5 ^ (elapsed days x weight(kind) / HALF_LIFE_DAYS)
    last_decayed = now

``elapsed`` runs from the latest of ``held_since``, ``last_decayed`` and ``last_accessed``
to ``now``: the clock starts no earlier than when this installation first held the truth
(``held_since``: loaded, mined, written by the host or made by a merge), so disuse is only
what the product has seen. A truth stated long ago (``created_at``: LoCoMo's 2023, an
import's own dates) and loaded today starts at full relevance, and a truth mined in a
pass (dated by its session) is not decayed, or pruned, by that same pass.

Because the exponent adds up over intervals, decaying hourly, daily or once over the
same span gives the same relevance (up to float rounding), and a second pass at the
same time changes nothing. A use reported with
``record_access`` restarts the clock from that use (the access baseline), without
restoring what had decayed before it. Weights come from ``IRIS_CONSOLIDATION_DECAY_WEIGHTS``
(kinds not listed: 1). Protected truths (pinned, of origin user or agent, or at the
max generation) never decay: they are not selected.

Writes ``relevance`` and ``last_decayed`` only, in one statement, so ``updated_at``
is untouched (the incremental cursor and the judge's freshness check ignore decay).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction

from ...conf import app_settings
from ...models import StageResult, Truth

BAD_WEIGHTS = (
    "IRIS_CONSOLIDATION_DECAY_WEIGHTS must be 'kind=weight,...' with weights >= 0, e.g. 'fact=0.5,working=2'; "
    "got {value!r}."
)


def parse_weights(value: str | Mapping[str, Any]) -> dict[str, float]:
    """``{"fact": 0.5, ...}`` from ``"fact=0.5,working=2"`` or a mapping.

    Raises ``ImproperlyConfigured`` for a malformed entry or a negative weight.
    """
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
    else:
        items = []
        for part in str(value).split(","):
            if not part.strip():
                continue
            if "=" not in part:
                raise ImproperlyConfigured(BAD_WEIGHTS.format(value=value))
            kind, _, weight = part.partition("=")
            items.append((kind.strip(), weight.strip()))
    weights: dict[str, float] = {}
    for kind, weight in items:
        try:
            number = float(weight)
        except (TypeError, ValueError):
            raise ImproperlyConfigured(BAD_WEIGHTS.format(value=value)) from None
        if not kind or number < 0:
            raise ImproperlyConfigured(BAD_WEIGHTS.format(value=value))
        weights[kind] = number
    return weights


def weight_of(kind: str, weights: Mapping[str, float]) -> float:
    """The decay weight of ``kind``: the configured one, else 1."""
    return float(weights.get(kind, 1.0))


def baseline(*, held_since: datetime, last_decayed: datetime | None, last_accessed: datetime | None) -> datetime:
    """Where elapsed time starts for a truth: the latest of ``held_since`` (when the
    installation first held it), ``last_decayed`` and ``last_accessed``. A use or a decay
    dated before the truth was held (an import's own history) does not move it earlier."""
    return max(t for t in (held_since, last_decayed, last_accessed) if t is not None)


def decayed_relevance(
    *, relevance: float, since: datetime, now: datetime, weight: float, half_life_days: float
) -> float:
    """``relevance x 0.5 ^ (days(since..now) x weight / half_life_days)``; no time, no change."""
    days = max(0.0, (now - since).total_seconds() / 86400.0)
    if days == 0.0 or weight == 0.0:
        return float(relevance)
    return float(relevance) * 0.5 ** (days * weight / half_life_days)


@dataclass(frozen=True, kw_only=True)
class DecayResult:
    """Decay of one user's truths: ``relevance`` maps truth id -> post-decay value
    (every truth examined, changed or not); ``changed`` counts the values that moved."""

    examined: int
    changed: int
    relevance: dict[int, float]
    findings: list[dict[str, Any]]


#: The columns ``decay_user`` reads, in the order of its rows.
_FIELDS = ("id", "content", "kind", "relevance", "held_since", "last_decayed", "last_accessed")


def decay_user(*, user_id: int, now: datetime, write: bool) -> DecayResult:
    """Decay ``user_id``'s consolidatable truths to ``now`` (see the module docstring).

    ``write=False`` computes only (report mode, dry runs). Transaction: one, around the
    read and the write, with the rows locked so that a concurrent ``record_access`` is
    not lost. Queries: one read, and with ``write`` one ``UPDATE ... FROM unnest(...)``
    of every examined row (``relevance`` and ``last_decayed`` only, as ``bulk_update``
    would, so ``updated_at`` is untouched). Raises ``ImproperlyConfigured`` for bad weights.
    """
    weights = parse_weights(app_settings.DECAY_WEIGHTS)
    half_life = float(app_settings.HALF_LIFE_DAYS)
    with transaction.atomic():
        qs = Truth.objects.for_user(user_id).consolidatable(max_generation=app_settings.MAX_GENERATION)
        if write:
            qs = qs.select_for_update()
        rows = list(qs.values_list(*_FIELDS))
        result = decay_rows(rows, now=now, weights=weights, half_life=half_life)
        if write and result.relevance:
            _write(result.relevance, now=now)
    return result


def _write(relevance: Mapping[int, float], *, now: datetime) -> None:
    """Set ``relevance`` (truth id -> value) and ``last_decayed = now`` in one statement."""
    table = connection.ops.quote_name(Truth._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} AS t SET relevance = v.relevance, last_decayed = %s "
            "FROM unnest(%s::bigint[], %s::double precision[]) AS v(id, relevance) WHERE t.id = v.id",
            [now, list(relevance), list(relevance.values())],
        )


def decay_rows(
    rows: Iterable[tuple[Any, ...]], *, now: datetime, weights: Mapping[str, float] | None = None,
    half_life: float | None = None,
) -> DecayResult:
    """Decay over ``(id, content, kind, relevance, held_since, last_decayed, last_accessed)``
    rows (``_FIELDS``), ``baseline`` and ``decayed_relevance`` per row: no model instance per truth."""
    weights = parse_weights(app_settings.DECAY_WEIGHTS) if weights is None else weights
    half_life = float(app_settings.HALF_LIFE_DAYS) if half_life is None else half_life
    relevance: dict[int, float] = {}
    findings: list[dict[str, Any]] = []
    changed = 0
    examined = 0
    for pk, content, kind, before, held_since, last_decayed, last_accessed in rows:
        examined += 1
        since = baseline(held_since=held_since, last_decayed=last_decayed, last_accessed=last_accessed)
        new = decayed_relevance(
            relevance=before, since=since, now=now, weight=weight_of(kind, weights), half_life_days=half_life
        )
        relevance[pk] = new
        if new != before:
            changed += 1
            if len(findings) < StageResult.MAX_FINDINGS:
                findings.append(
                    {"truth_id": pk, "content": content, "before": round(before, 6), "after": round(new, 6)}
                )
    return DecayResult(examined=examined, changed=changed, relevance=relevance, findings=findings)

