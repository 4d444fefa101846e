"""The forecast of a pass's judge spend: clusters, model calls, tokens and money, before
any call is made.

``forecast_user`` works on one user's clusters as phase 1 found them: a cluster the
verdict cache answers or the deterministic pre-pass settles needs no call; the rest go
to the model ``CLUSTERS_PER_CALL`` at a time, exactly as ``consolidation.batches``
sends them. Prompt tokens are counted on the very messages those calls would send
(``prompts.build_messages``, litellm's token counter for the model); completion tokens
are an assumption per cluster (``COMPLETION_TOKENS_PER_CLUSTER``). Money is at the
model's price in litellm's local price map, with no prompt-cache discount (an upper
bound); a model without a price there has no forecast cost, never $0.

``consolidation.estimate`` runs phase 1 for every user of a would-be run inside a
transaction that is rolled back: nothing is written (not even embeddings), no judge is
built and no call is made, so no API key is needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from types import SimpleNamespace
from typing import Any

from ...choices import llm_judge_name
from ...conf import app_settings
from ...llm import rules, second_look
from ...llm.base import JudgeRequest
from ...llm.prompts import PROMPT_VERSION, build_messages
from ...models import Truth
from . import clustering, judging, verdict_cache

#: Completion tokens assumed per cluster sent to the model. An assumption, not a
#: measurement: a "keep" entry with a one-sentence reasoning is about 40 tokens, a
#: merge with its content and reason about 120; 80 sits between them.
COMPLETION_TOKENS_PER_CLUSTER = 80
#: Share of judge calls followed by a second look (``llm/second_look.py``), measured on a
#: real model's recorded replies (``eval_judge --recorded``): 20% of LoCoMo's calls, 8% of
#: PersonaChat's, 8-10% of the golden sets'. The highest is taken: a forecast is a bound.
SECOND_LOOK_CALL_SHARE = 0.20
#: Checks per second look (same recordings: 1.3 on LoCoMo, 1.0 elsewhere), and tokens per
#: check: its truths and content in the request (a cluster's data, about 120), the answer
#: with its reason (about 40). Assumptions beside the measured share, not measurements.
CHECKS_PER_SECOND_LOOK = 1.5
PROMPT_TOKENS_PER_CHECK = 120
COMPLETION_TOKENS_PER_CHECK = 40


@dataclass(frozen=True, kw_only=True)
class Forecast:
    """What a pass would ask of the judge. ``model`` is "" for the rule judge (no call).

    ``clusters`` = ``cached`` (verdict cache) + ``prepass`` (settled without a call)
    + ``to_model``; ``calls`` is how many calls carry ``to_model`` at ``per_call``.
    """

    model: str = ""
    per_call: int = 1
    users: int = 0
    clusters: int = 0
    cached: int = 0
    prepass: int = 0
    to_model: int = 0
    calls: int = 0
    #: Second-look calls expected after those judge calls (``SECOND_LOOK_CALL_SHARE``);
    #: their tokens are in ``prompt_tokens`` and ``completion_tokens``.
    second_looks: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: Forecast) -> Forecast:
        counts = {
            f.name: getattr(self, f.name) + getattr(other, f.name)
            for f in fields(self)
            if f.name not in ("model", "per_call")
        }
        return Forecast(model=self.model or other.model, per_call=max(self.per_call, other.per_call), **counts)

    def cost(self) -> float | None:
        """USD at the model's price in litellm's local map (no cache discount); 0.0 for
        the rule judge; None when the map has no price for the model."""
        if not self.model:
            return 0.0
        from ...llm.litellm_client import price_per_token

        price = price_per_token(self.model)
        if price is None:
            return None
        return self.prompt_tokens * price[0] + self.completion_tokens * price[1]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (stored on a dry run as ``ConsolidationRun.forecast``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Forecast:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in names})


def _realiased(requests: Sequence[JudgeRequest]) -> list[JudgeRequest]:
    """``requests`` with aliases t1, t2, ... running across them, as one call has them."""
    result, n = [], 0
    for request in requests:
        members = []
        for member in request.members:
            n += 1
            members.append(replace(member, alias=f"t{n}"))
        result.append(JudgeRequest(members=tuple(members)))
    return result


def forecast_user(
    *, user_id: int, clusters: Sequence[clustering.CandidateCluster], model: str, per_call: int | None = None
) -> Forecast:
    """The forecast for one user's ``clusters`` under the LLM judge ``model`` ("" for
    the rule judge: every cluster settled without a call). Reads only."""
    per_call = max(1, int(per_call or app_settings.CLUSTERS_PER_CALL))
    forecast = Forecast(model=model, per_call=per_call, users=1, clusters=len(clusters))
    if not model:
        return replace(forecast, prepass=len(clusters))
    identity = SimpleNamespace(name=llm_judge_name(model), model=model, prompt_version=PROMPT_VERSION)
    max_generation = app_settings.MAX_GENERATION
    cached = prepass = 0
    to_model: list[JudgeRequest] = []
    for cluster in clusters:
        truths = list(Truth.objects.filter(pk__in=cluster.member_ids))
        request, _ = judging.build_request(truths)
        if verdict_cache.lookup(user_id=user_id, request=request, client=identity) is not None:  # type: ignore[arg-type]
            cached += 1
            continue
        pre = judging._validate(request, rules.RuleJudge().judge(request).actions)
        merges = [a for a in pre.accepted if a.action == "merge"]
        left = judging.after_prepass(request, merges, max_generation=max_generation)
        if len(left.members) < 2:
            prepass += 1
            continue
        to_model.append(left)
    from ...llm.litellm_client import count_tokens

    prompt_tokens = 0
    for start in range(0, len(to_model), per_call):
        prompt_tokens += count_tokens(model, build_messages(_realiased(to_model[start : start + per_call])))
    calls = math.ceil(len(to_model) / per_call)
    looks, look_prompt, look_completion = _second_looks(model, calls)
    return replace(
        forecast,
        cached=cached,
        prepass=prepass,
        to_model=len(to_model),
        calls=calls,
        second_looks=looks,
        prompt_tokens=prompt_tokens + look_prompt,
        completion_tokens=len(to_model) * COMPLETION_TOKENS_PER_CLUSTER + look_completion,
    )


def _second_looks(model: str, calls: int) -> tuple[int, int, int]:
    """(second-look calls, their prompt tokens, their completion tokens) expected after
    ``calls`` judge calls under the ``verify`` risk policy; zeros under another."""
    if app_settings.RISK_POLICY != "verify" or not calls:
        return 0, 0, 0
    from ...llm.litellm_client import count_tokens  # litellm: imported only where a model is priced

    looks = math.ceil(calls * SECOND_LOOK_CALL_SHARE)
    checks = math.ceil(looks * CHECKS_PER_SECOND_LOOK)
    system = count_tokens(model, second_look.build_messages([]))
    return looks, looks * system + checks * PROMPT_TOKENS_PER_CHECK, checks * COMPLETION_TOKENS_PER_CHECK
