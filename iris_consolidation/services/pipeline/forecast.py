"""The forecast of a pass's model spend: clusters, model calls, tokens and money, before
any call is made.

``forecast_user`` works on one user's clusters as phase 1 found them: a cluster the
verdict cache answers or the deterministic pre-pass settles needs no call; the rest go
to the model ``CLUSTERS_PER_CALL`` at a time, exactly as ``queue/dispatch.batches``
sends them. Prompt tokens are counted on the very messages those calls would send
(``prompts.build_messages``, litellm's token counter for the model); completion tokens
are an assumption per cluster (``COMPLETION_TOKENS_PER_CLUSTER``). Money is at the
model's price in litellm's local price map, with no prompt-cache discount (an upper
bound); a model without a price there has no forecast cost, never $0.

``run/plan.estimate`` runs phase 1 for every user of a would-be run inside a
transaction that is rolled back: nothing is written (not even embeddings), no judge is
built and no call is made, so no API key is needed. The stages around the judge (mining,
noise, relocation, promotion) run there in their report mode with a ``StageRecorder`` in
place of the model's client: each request they would send is built as the pass builds it
(the same sessions, known truths, candidates and remembered answers), its prompt tokens
counted, and no call made (the stage then sees a failed call and goes on, as it does in a
pass). Completion tokens per stage call are assumptions (``STAGE_COMPLETION_TOKENS``).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from types import SimpleNamespace
from typing import Any

from ...choices import llm_judge_name
from ...conf import app_settings
from ...exceptions import JudgeResponseInvalid, JudgeUnavailable
from ...llm import hygiene as stage_prompts
from ...llm import rules, second_look
from ...llm.base import JudgeRequest, NoiseCandidate, NoiseReply
from ...llm.prompts import PROMPT_VERSION, build_messages, build_noise_messages
from ...models import Truth
from . import clustering, judgement, judging, verdict_cache

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
    #: Change pairs mining is expected to add to the judge's groups (``MINED_CHANGES_PER_MINING_CALL``;
    #: counted in ``to_model`` and ``calls``).
    mined_pairs: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: The stages around the judge (``STAGES``): calls, prompt tokens (counted on their
    #: requests) and completion tokens (``STAGE_COMPLETION_TOKENS``) of each; zero unless
    #: ``stages_forecast`` (``run/plan.estimate`` forecasts them, a dry run makes them).
    mine_calls: int = 0
    mine_prompt_tokens: int = 0
    mine_completion_tokens: int = 0
    check_calls: int = 0
    check_prompt_tokens: int = 0
    check_completion_tokens: int = 0
    noise_calls: int = 0
    noise_prompt_tokens: int = 0
    noise_completion_tokens: int = 0
    relocate_calls: int = 0
    relocate_prompt_tokens: int = 0
    relocate_completion_tokens: int = 0
    promote_calls: int = 0
    promote_prompt_tokens: int = 0
    promote_completion_tokens: int = 0
    stages_forecast: bool = False

    def __add__(self, other: Forecast) -> Forecast:
        counts = {
            f.name: getattr(self, f.name) + getattr(other, f.name)
            for f in fields(self)
            if f.name not in ("model", "per_call", "stages_forecast")
        }
        return Forecast(model=self.model or other.model, per_call=max(self.per_call, other.per_call),
                        stages_forecast=self.stages_forecast or other.stages_forecast, **counts)

    def stage(self, name: str) -> tuple[int, int, int]:
        """``(calls, prompt tokens, completion tokens)`` of stage ``name`` (one of ``STAGES``)."""
        return (getattr(self, f"{name}_calls"), getattr(self, f"{name}_prompt_tokens"),
                getattr(self, f"{name}_completion_tokens"))

    def model_calls(self) -> int:
        """Every call of the pass: the judge's, its second looks and the stages'."""
        return self.calls + self.second_looks + sum(self.stage(name)[0] for name in STAGES)

    def total_tokens(self) -> tuple[int, int]:
        """``(prompt, completion)`` tokens of every call of the pass."""
        stages = [self.stage(name) for name in STAGES]
        return (self.prompt_tokens + sum(s[1] for s in stages), self.completion_tokens + sum(s[2] for s in stages))

    def cost(self) -> float | None:
        """USD of every call (``total_tokens``) at the model's price in litellm's local map
        (no cache discount); 0.0 for the rule judge; None when the map has no price for the model."""
        if not self.model:
            return 0.0
        from ...llm.litellm_client import price_per_token

        price = price_per_token(self.model)
        if price is None:
            return None
        prompt, completion = self.total_tokens()
        return prompt * price[0] + completion * price[1]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (stored on a dry run as ``ConsolidationRun.forecast``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Forecast:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in names})


#: The stages around the judge that may call a model, in the order of a pass ("check": mining's
#: novelty check, ``hygiene/recheck``).
STAGES = ("mine", "check", "noise", "relocate", "promote")
#: Completion tokens assumed per call of each stage. Assumptions, not measurements: a
#: mining reply of two truths with kind, confidence, evidence and reason is about 150; a
#: relocation or promotion reply naming one entry with its reason about 60.
STAGE_COMPLETION_TOKENS = {"mine": 150, "check": 0, "relocate": 60, "promote": 60}
#: Completion tokens per proposal of mining's novelty check (its answer, the truth it names and
#: a one-sentence reason), measured on LoCoMo (docs/benchmarks.md "Mining novelty": 45-53).
CHECK_COMPLETION_TOKENS_PER_PROPOSAL = 50
#: Proposals of a novelty check call and prompt tokens of each (its content and its five
#: stored truths), for a check an estimate expects but cannot build (``StageRecorder.expect``).
#: Measured on LoCoMo: docs/benchmarks.md "Mining novelty".
PROPOSALS_PER_CHECK = 3
PROMPT_TOKENS_PER_CHECKED_PROPOSAL = 240
#: Mined change pairs (a proposal that changes a stored truth, judged beside it) per mining
#: call, measured on LoCoMo (docs/benchmarks.md "Mining novelty").
MINED_CHANGES_PER_MINING_CALL = 0.1
#: Prompt tokens of one mined change pair in a judge call (two short truths and their fields).
#: An assumption, as ``PROMPT_TOKENS_PER_CHECK``.
PROMPT_TOKENS_PER_MINED_PAIR = 120
#: Completion tokens assumed per noise candidate (its verdict and one-line reason).
NOISE_COMPLETION_TOKENS_PER_CANDIDATE = 30
#: The error a stage sees in place of a reply while a pass is forecast (no call is made).
FORECAST_ONLY = "forecast only: no call made"


@dataclass(kw_only=True)
class StageRecorder:
    """The stages' model client while a pass is forecast: it has the LLM judge's methods
    (``ask_json``, ``classify_noise``), counts each request's prompt tokens for ``model``
    and raises in place of calling (``JudgeResponseInvalid``, or ``JudgeUnavailable``
    for noise: each stage goes on as after a failed call). ``counts``: per stage,
    ``[calls, prompt tokens, completion tokens]``."""

    model: str
    counts: dict[str, list[int]] = field(default_factory=lambda: {name: [0, 0, 0] for name in STAGES})
    calls_model: bool = True
    #: Mining asks it one request at a time (its counts are not shared between threads).
    concurrent: bool = False

    @property
    def name(self) -> str:
        return llm_judge_name(self.model)

    def _add(self, stage: str, messages: list[dict[str, Any]], completion: int) -> None:
        from ...llm.litellm_client import count_tokens

        counts = self.counts[stage]
        counts[0] += 1
        counts[1] += count_tokens(self.model, messages)
        counts[2] += completion

    def ask_json(self, messages: list[dict[str, Any]], parse: Any) -> Any:
        """Count a mining (or its novelty check's), relocation or promotion request (told
        apart by its system prompt); raises ``JudgeResponseInvalid`` (``FORECAST_ONLY``)."""
        systems = {stage_prompts.MINING_SYSTEM: "mine", stage_prompts.RELOCATE_SYSTEM: "relocate",
                   stage_prompts.PROMOTE_SYSTEM: "promote", stage_prompts.CHECK_SYSTEM: "check"}
        stage = systems[messages[0]["content"]]
        completion = STAGE_COMPLETION_TOKENS[stage]
        if stage == "check":  # per proposal
            completion = CHECK_COMPLETION_TOKENS_PER_PROPOSAL * messages[-1]["content"].count('"stored":')
        self._add(stage, messages, completion)
        raise JudgeResponseInvalid(FORECAST_ONLY)

    def classify_noise(self, candidates: Sequence[NoiseCandidate]) -> NoiseReply:
        """Count a noise classification request; raises ``JudgeUnavailable`` (``FORECAST_ONLY``)."""
        self._add("noise", build_noise_messages(candidates, cacheable=False),
                  NOISE_COMPLETION_TOKENS_PER_CANDIDATE * len(candidates))
        raise JudgeUnavailable(FORECAST_ONLY)

    def mark(self) -> tuple[int, int]:
        """(mining calls, check calls) counted so far: take it before a user's plan (``expect``)."""
        return self.counts["mine"][0], self.counts["check"][0]

    def expect(self, mark: tuple[int, int]) -> int:
        """After one user's plan (``mark`` taken before it), what its mining calls are
        expected to add (their replies are unknown here): a novelty check call when none was
        built (a user's fresh and carried proposals share one call of ``recheck.MAX_PER_CALL``;
        its tokens ``PROPOSALS_PER_CHECK`` proposals' worth), counted in the check stage; and
        returns the mined change pairs expected for the judge (``MINED_CHANGES_PER_MINING_CALL``
        a mining call, rounded up per user: a bound)."""
        mining = self.counts["mine"][0] - mark[0]
        if mining and self.counts["check"][0] == mark[1]:
            from ...llm.litellm_client import count_tokens

            system = count_tokens(self.model, [{"role": "system", "content": stage_prompts.CHECK_SYSTEM}])
            counts = self.counts["check"]
            counts[0] += 1
            counts[1] += system + PROPOSALS_PER_CHECK * PROMPT_TOKENS_PER_CHECKED_PROPOSAL
            counts[2] += PROPOSALS_PER_CHECK * CHECK_COMPLETION_TOKENS_PER_PROPOSAL
        return math.ceil(mining * MINED_CHANGES_PER_MINING_CALL)

    def forecast(self) -> dict[str, int]:
        """The ``Forecast`` fields of the counted requests."""
        figures: dict[str, int] = {}
        for stage, (calls, prompt, completion) in self.counts.items():
            figures.update({f"{stage}_calls": calls, f"{stage}_prompt_tokens": prompt,
                            f"{stage}_completion_tokens": completion})
        return figures


_RECORDER: contextvars.ContextVar[StageRecorder | None] = contextvars.ContextVar("iris_stage_recorder", default=None)


@contextlib.contextmanager
def recording(model: str) -> Iterator[StageRecorder]:
    """Inside: the stages' model client is a ``StageRecorder`` for ``model`` (``recorder``)."""
    recorder = StageRecorder(model=model)
    token = _RECORDER.set(recorder)
    try:
        yield recorder
    finally:
        _RECORDER.reset(token)


def recorder() -> StageRecorder | None:
    """The ``StageRecorder`` of a forecast in progress here, else None."""
    return _RECORDER.get()


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
    *, user_id: int, clusters: Sequence[clustering.CandidateCluster], model: str, per_call: int | None = None,
    mined_pairs: int = 0,
) -> Forecast:
    """The forecast for one user's ``clusters`` under the LLM judge ``model`` ("" for
    the rule judge: every cluster settled without a call), and ``mined_pairs`` change pairs
    mining is expected to add (``StageRecorder.expect``: sent with the others,
    ``PROMPT_TOKENS_PER_MINED_PAIR`` each). Reads only."""
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
        if verdict_cache.lookup(user_id=user_id, request=request, client=identity) is not None:
            cached += 1
            continue
        pre = judgement.validate_at_settings(request, rules.RuleJudge().judge(request).actions)
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
    calls = math.ceil((len(to_model) + mined_pairs) / per_call)
    if mined_pairs:  # the pairs' own tokens, and the system prompt of any call they add
        extra_calls = calls - math.ceil(len(to_model) / per_call)
        prompt_tokens += mined_pairs * PROMPT_TOKENS_PER_MINED_PAIR + extra_calls * count_tokens(
            model, build_messages([]))
    looks, look_prompt, look_completion = _second_looks(model, calls)
    return replace(
        forecast,
        clusters=len(clusters) + mined_pairs,
        cached=cached,
        prepass=prepass,
        to_model=len(to_model) + mined_pairs,
        mined_pairs=mined_pairs,
        calls=calls,
        second_looks=looks,
        prompt_tokens=prompt_tokens + look_prompt,
        completion_tokens=(len(to_model) + mined_pairs) * COMPLETION_TOKENS_PER_CLUSTER + look_completion,
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
