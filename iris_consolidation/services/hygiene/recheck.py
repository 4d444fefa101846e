"""Mining's novelty check: a proposal the model made without seeing its nearest stored truths
is shown beside them, and the model answers new, restates or changes (docs/llm.md's
novelty-check contract), before anything is added.

The mining call offers the model the stored truths nearest to each of the person's messages
(``novelty.known_for``), at most ``IRIS_CONSOLIDATION_MINING_KNOWN_TRUTHS``; a proposal's
own twin may not be among them, and a proposal the cap carried to a later pass
(``mining.carried``) was made against the memory of that earlier pass. Checked here
(``needs_check``): a fresh proposal with a live stored truth at cosine similarity
``>= BAND`` that its mining call did not offer, and every carried proposal. One call per
user and pass for up to ``MAX_PER_CALL`` proposals (``check``), each proposal with its
``COMPARED`` nearest live truths. The answer:

- ``restates`` a stored truth: skipped, naming it (not carried: nothing is lost);
- ``changes`` a stored truth: added as a change of it, so the pass asks the judge about the
  pair (``novelty.with_changes``), as for a change the mining call declared;
- ``new``: added;
- no answer (a reply that leaves the proposal out, a malformed reply after the client's
  retries, a failed call, the run's budget at mining's ceiling): skipped and carried to the
  next pass (``carry``), where it is checked again. Nothing unchecked is added.

The local restatement check (``novelty.restates``) runs first; this call sees only what it
let through.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...exceptions import JudgeResponseInvalid, JudgeUnavailable
from ...llm import hygiene as prompts
from ...models import ConsolidationRun, Truth
from . import budget

if TYPE_CHECKING:
    from .mining import Candidate

logger = logging.getLogger(__name__)

#: Cosine similarity at or above which a stored truth the mining call did not offer may be
#: the proposal's twin (measured on LoCoMo: docs/benchmarks.md "Mining novelty"): the
#: restatements the local check let through were at 0.79-0.88 from their twin.
BAND = 0.75
#: Proposals per check call.
MAX_PER_CALL = 20

SKIP_CHECKED = "novelty check: restates truth #{truth} ({reason})"
SKIP_UNCHECKED = "not checked ({why}); proposed again at the next pass"
NO_ANSWER = "the check's reply left it out"
CHANGES_CHECKED = "; the novelty check found it changes truth #{truth}: {reason}"


@dataclass(kw_only=True)
class Pending:
    """A proposal to check and its nearest live stored truths (``distance`` annotated),
    nearest first."""

    candidate: Candidate
    stored: list[Truth]


def needs_check(*, stored: Sequence[Truth], offered: frozenset[int], carried: bool) -> bool:
    """Whether a proposal goes to the check: carried (with a live truth near it at all), or a
    live stored truth of ``stored`` (with ``distance``) at cosine similarity ``>= BAND``
    that is not among the truths its mining call offered (``offered``)."""
    if carried:
        return bool(stored)
    return any(t.pk not in offered and 1.0 - float(t.distance) >= BAND for t in stored)  # type: ignore[attr-defined]


def request(pending: Sequence[Pending], subject: str | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One check call's messages and its aliases: ``{"p1": Pending, "s1": Truth, ...}``
    (a stored truth near two proposals is one alias)."""
    aliases: dict[str, Any] = {}
    by_pk: dict[int, str] = {}
    proposals = []
    for n, item in enumerate(pending, start=1):
        aliases[f"p{n}"] = item
        stored = []
        for truth in item.stored:
            if truth.pk not in by_pk:
                by_pk[truth.pk] = f"s{len(by_pk) + 1}"
                aliases[by_pk[truth.pk]] = truth
            stored.append({"id": by_pk[truth.pk], "content": truth.content,
                           "stated": truth.created_at.strftime("%Y-%m")})
        proposals.append({"id": f"p{n}", "content": item.candidate.content, "stored": stored})
    data = {"subject": subject, "proposals": proposals}
    return prompts.messages_for(prompts.CHECK_SYSTEM, data), aliases


def check(*, run: ConsolidationRun, client: Any, pending: Sequence[Pending], subject: str | None) -> tuple[
    list[Candidate], list[Candidate], int
]:
    """Ask the check about ``pending`` (``MAX_PER_CALL`` a call, one at a time, each below
    mining's ceiling of the run's budget) and apply the answers to the candidates: returns
    (kept, skipped, calls made). A kept candidate the check found to change a truth has
    ``changes`` set (when it had none); a skipped one has ``skipped`` and, unless it
    restates a truth, ``carry``. Adds each call's spend to the run; no other write."""
    kept: list[Candidate] = []
    skipped: list[Candidate] = []
    calls = 0
    for start in range(0, len(pending), MAX_PER_CALL):
        messages, aliases = request(pending[start: start + MAX_PER_CALL], subject)
        answers: dict[str, prompts.CheckAnswer] = {}
        failure = ""
        if not budget.may_call(run, "mine", client):
            failure = budget.DEFERRED
        else:
            calls += 1
            failure, answers = _ask(run=run, client=client, messages=messages, aliases=aliases)
        for alias, item in ((a, p) for a, p in aliases.items() if a.startswith("p")):
            c = item.candidate
            answer = answers.get(alias)
            if answer is None:
                c.skipped, c.carry = SKIP_UNCHECKED.format(why=failure or NO_ANSWER), True
                skipped.append(c)
            elif answer.answer == "restates":
                truth = aliases[answer.truth]
                c.skipped = SKIP_CHECKED.format(truth=truth.pk, reason=answer.reason or "-")
                skipped.append(c)
            else:
                if answer.answer == "changes" and c.changes is None:
                    truth = aliases[answer.truth]
                    c.changes, c.changes_similarity = truth.pk, 1.0 - float(truth.distance)
                    c.reason += CHANGES_CHECKED.format(truth=truth.pk, reason=answer.reason or "-")
                kept.append(c)
    return kept, skipped, calls


def _ask(
    *, run: ConsolidationRun, client: Any, messages: list[dict[str, Any]], aliases: dict[str, Any]
) -> tuple[str, dict[str, prompts.CheckAnswer]]:
    """One check call: ("", answers) or (why it failed, {}); its spend added to the run."""
    offered = {a: {k for k, v in aliases.items() if k.startswith("s") and v in p.stored}
               for a, p in aliases.items() if a.startswith("p")}
    try:
        answers, spend = client.ask_json(messages, lambda raw: prompts.parse_check(raw, offered=offered))
    except (JudgeResponseInvalid, JudgeUnavailable) as exc:
        ConsolidationRun.objects.filter(pk=run.pk).add_spend(getattr(exc, "spend", None))
        logger.info("run %s: the novelty check failed: %s", run.pk, exc)
        return f"the check failed: {exc}", {}
    ConsolidationRun.objects.filter(pk=run.pk).add_spend(spend)
    return "", answers
