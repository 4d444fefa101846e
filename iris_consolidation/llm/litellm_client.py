"""The LLM judge and the remote embedder: the only module that imports litellm.

Every call passes its own timeout and turns litellm's (and the OpenAI client's)
internal retries off (``num_retries=0``, ``max_retries=0``): the queue does the
retrying, so a provider's wait is never taken twice. Provider API keys are read by
litellm from the environment; this module checks they are present and never reads,
copies or logs them.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-list download

import litellm  # noqa: E402
import openai  # noqa: E402  (litellm's exceptions derive from the OpenAI client's)

litellm.suppress_debug_info = True  # no "Give Feedback" banners on the operator's terminal

from ..choices import llm_judge_name  # noqa: E402
from ..conf import app_settings  # noqa: E402
from ..embeddings import check_dimensions  # noqa: E402
from ..exceptions import (  # noqa: E402
    EmbeddingDimensionMismatch,
    EmbeddingError,
    JudgeMisconfigured,
    JudgeRateLimited,
    JudgeResponseInvalid,
    JudgeUnavailable,
)
from ..models import EMBEDDING_DIMENSIONS  # noqa: E402
from . import second_look  # noqa: E402
from .base import BatchReply, JudgeRequest, NoiseCandidate, NoiseReply, Spend, Verdict  # noqa: E402
from .parsing import parse_batch, parse_noise  # noqa: E402
from .prompts import (  # noqa: E402
    NOISE_PROMPT_VERSION,
    PROMPT_VERSION,
    build_messages,
    build_noise_messages,
    cluster_id,
    payload,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

MISSING_KEY = (
    "The LLM judge's model {model!r} needs the environment variable(s) {keys}. Set them, "
    "or use IRIS_CONSOLIDATION_JUDGE=rules for the offline judge."
)
TRUNCATED = "The judge's reply was cut off (finish_reason=length)."


def _check_environment(model: str, api_base: str | None) -> None:
    info = litellm.validate_environment(model=model, api_base=api_base)
    missing = info.get("missing_keys") or []
    if missing:
        raise JudgeMisconfigured(MISSING_KEY.format(model=model, keys=", ".join(missing)))


#: Exceptions under which litellm hides that the server was never reached (a refused
#: connection arrives as litellm's InternalServerError 500 over openai's APIConnectionError).
_NOT_REACHED = ("APIConnectionError", "ConnectError", "ConnectTimeout")


def failure_cause(exc: BaseException) -> str:
    """What went wrong with a model call, in a few words an operator can act on: the root
    of the exception chain ("could not be reached: connection refused", "timed out"),
    else the error's class and HTTP status ("InternalServerError (HTTP 500)"). Never the
    request, so never a key."""
    chain: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in chain and len(chain) < 12:
        chain.append(link)
        link = link.__cause__ or link.__context__
    root = chain[-1]
    if isinstance(root, OSError) and root.strerror:
        return f"could not be reached: {root.strerror.lower()}"
    if any(type(e).__name__ in _NOT_REACHED for e in chain):
        return f"could not be reached: {type(root).__name__}"
    if any(isinstance(e, TimeoutError) or "Timeout" in type(e).__name__ for e in chain):
        return "timed out"
    status = getattr(exc, "status_code", None)
    return f"{type(exc).__name__} (HTTP {status})" if status else type(exc).__name__


def _retry_after(exc: Exception) -> float | None:
    """Seconds to wait from a 429's ``retry-after`` or provider reset headers, if any."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    for name in ("retry-after", "x-ratelimit-reset-requests", "x-ratelimit-reset-tokens", "x-ratelimit-reset"):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(str(value).rstrip("s")))
        except ValueError:
            continue
    return None


_warmed = False


def _warm_up(model: str) -> None:
    """Make litellm's lazy first-call imports now (about 0.4-1 s), with an offline mock
    reply, so that a judge call starts its HTTP request right after the rate limiter
    lets it (the limit counts starts; the provider counts arrivals). Once per process."""
    global _warmed
    if _warmed:
        return
    _warmed = True
    try:
        litellm.completion(model=model, messages=[{"role": "user", "content": "warm-up"}], mock_response="{}")
    except Exception:  # only a speed-up: a model litellm cannot mock still works
        logger.debug("litellm warm-up failed for %s", model, exc_info=True)


def price_per_token(model: str) -> tuple[float, float] | None:
    """``(input, output)`` USD per token of ``model`` from litellm's local price map,
    or None when the map has no price for it (a cost is then unknown, never 0)."""
    try:
        prompt, completion = litellm.cost_per_token(model=model, prompt_tokens=1_000_000, completion_tokens=1_000_000)
    except Exception:
        return None
    return float(prompt) / 1_000_000, float(completion) / 1_000_000


def count_tokens(model: str, messages: list[dict[str, Any]]) -> int:
    """Prompt tokens of ``messages`` for ``model`` by litellm's token counter (the
    model's tokenizer where litellm ships one, else its default); no network."""
    return int(litellm.token_counter(model=model, messages=messages))


def usage_spend(response: Any) -> Spend:
    """The ``Spend`` of one litellm response: prompt tokens (and the part of them read
    from the provider's prompt cache: ``prompt_tokens_details.cached_tokens``, or
    Anthropic's ``cache_read_input_tokens``), completion tokens, and the cost from
    litellm's local price map (``unpriced`` when the model has none there)."""
    usage = getattr(response, "usage", None)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    cached = cached or int(getattr(usage, "cache_read_input_tokens", 0) or 0)
    try:
        cost, unpriced = float(litellm.completion_cost(completion_response=response) or 0.0), 0
    except Exception:  # no price for this model: the cost is unknown, not 0
        cost, unpriced = 0.0, 1
    return Spend(
        calls=1,
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        cached_tokens=cached,
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        cost=cost,
        unpriced=unpriced,
    )


class LiteLLMJudge:
    """``JudgeClient`` over ``litellm.completion``: one call for one or several clusters
    of one user (wire contract v2), JSON output, the system prompt marked cacheable
    where litellm knows the model supports prompt caching.

    A reply that is malformed or truncated as a whole is asked again up to ``attempts``
    times in all, then raises ``JudgeResponseInvalid``. Transport, auth and timeout
    errors raise ``JudgeUnavailable``; a 429 raises ``JudgeRateLimited`` with the
    provider's wait. Either carries ``spend``: what the call's earlier attempts cost.
    """

    def __init__(
        self,
        *,
        model: str,
        api_base: str | None,
        timeout: float,
        attempts: int,
        verify_model: str = "",
        api_key: str | None = None,
    ) -> None:
        self.model = model
        self.api_base = api_base or None
        self.timeout = timeout
        self.attempts = max(1, attempts)
        #: The second look's model (``VERIFY_MODEL``); the judge's own when empty.
        self.verify_model = verify_model or model
        # Only for a server of our own (the replay of recorded replies): a provider's key
        # is read by litellm from the environment, never passed or stored here.
        self._api_key = api_key
        self.name = llm_judge_name(model)
        self.calls_model = True

    @property
    def prompt_version(self) -> str:
        """The prompt's version (``prompts.PROMPT_VERSION``); part of the verdict cache key."""
        return PROMPT_VERSION

    @classmethod
    def from_settings(cls) -> LiteLLMJudge:
        """Build from ``IRIS_CONSOLIDATION_*``; raises ``JudgeMisconfigured`` if a key is missing."""
        judge = cls(
            model=app_settings.MODEL,
            api_base=app_settings.LLM_API_BASE,
            timeout=float(app_settings.LLM_TIMEOUT),
            attempts=int(app_settings.LLM_ATTEMPTS),
            verify_model=str(app_settings.VERIFY_MODEL or ""),
        )
        _check_environment(judge.model, judge.api_base)
        if judge.verify_model != judge.model:
            _check_environment(judge.verify_model, judge.api_base)
        _warm_up(judge.model)
        return judge

    def _json_mode(self) -> bool:
        """Whether the provider takes ``response_format`` (JSON output mode); the reply
        is parsed strictly either way."""
        try:
            return "response_format" in (litellm.get_supported_openai_params(model=self.model) or [])
        except Exception:  # unknown provider: send plain text and parse strictly
            return False

    def price_known(self) -> bool:
        """Whether litellm's local price map prices this model (a cost cap needs it)."""
        return price_per_token(self.model) is not None

    def _cacheable(self) -> bool:
        """Whether litellm's model map says the model supports prompt caching (Anthropic
        and others take a ``cache_control`` mark; OpenAI caches long prefixes by itself)."""
        try:
            return bool(litellm.utils.supports_prompt_caching(model=self.model))
        except Exception:  # unknown model: plain messages
            return False

    def _complete(self, messages: list[dict[str, Any]], *, model: str | None = None) -> Any:
        model = model or self.model
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "timeout": self.timeout,
            "num_retries": 0,
            "max_retries": 0,
            "temperature": 0,
        }
        if self._json_mode():
            kwargs["response_format"] = {"type": "json_object"}
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        try:
            return litellm.completion(**kwargs)
        except litellm.RateLimitError as exc:
            raise JudgeRateLimited(f"Rate limited by {model}: {exc}", retry_after=_retry_after(exc)) from exc
        except (litellm.Timeout, litellm.APIConnectionError) as exc:
            raise JudgeUnavailable(f"{model} did not answer: {failure_cause(exc)}") from exc
        except litellm.AuthenticationError as exc:
            raise JudgeUnavailable(f"{model} refused the credentials (authentication error).") from exc
        except litellm.exceptions.APIError as exc:  # 500s, bad gateway, ...
            raise JudgeUnavailable(f"{model} failed: {failure_cause(exc)}") from exc
        except openai.OpenAIError as exc:  # every other status litellm maps (500, 400, ...)
            raise JudgeUnavailable(f"{model} failed: {failure_cause(exc)}") from exc

    def _ask(
        self, messages: list[dict[str, Any]], parse: Callable[[str], T], *, what: str, model: str | None = None
    ) -> tuple[T, str, Spend, int]:
        """The one retry loop of every call: ``parse`` turns the reply's text into its
        result or raises ``JudgeResponseInvalid``; a malformed or truncated reply is asked
        again, up to ``attempts`` calls in all. Returns ``(result, raw text, spend,
        attempt)``. Raises ``JudgeResponseInvalid`` (the last one) or ``JudgeUnavailable``
        (``JudgeRateLimited`` for a 429), each with ``spend``: every attempt's, the
        failed ones included. ``model`` is the judge's unless given (the second look's)."""
        spend = Spend()
        last_error: JudgeResponseInvalid | None = None
        for attempt in range(1, self.attempts + 1):
            try:
                response = self._complete(messages, model=model)
            except JudgeUnavailable as exc:
                exc.spend = spend
                raise
            spend = spend + usage_spend(response)
            choice = response.choices[0]
            raw = choice.message.content or ""
            try:
                if choice.finish_reason == "length":
                    raise JudgeResponseInvalid(TRUNCATED, raw=raw)
                return parse(raw), raw, spend, attempt
            except JudgeResponseInvalid as exc:
                last_error = exc
                logger.warning("%s reply invalid (attempt %d/%d): %s", what, attempt, self.attempts, exc)
        assert last_error is not None
        last_error.spend = spend
        raise last_error

    def judge_batch(self, requests: Sequence[JudgeRequest]) -> BatchReply:
        """One call over ``requests`` (see the class docstring and ``JudgeClient``).

        ``BatchReply.shares`` splits the call's spend over the clusters by their share
        of the request's data (``prompts.payload``), so reviews add up to the run.
        """
        messages = build_messages(requests, cacheable=self._cacheable())
        ids = [cluster_id(i) for i in range(len(requests))]
        weights = [len(payload([r])) for r in requests]
        started = time.monotonic()
        results, raw, spend, attempt = self._ask(messages, lambda text: parse_batch(text, ids), what="judge")
        latency_ms = int((time.monotonic() - started) * 1000)
        verdicts: list[Verdict | None] = []
        errors: list[str] = []
        for result in results:
            if isinstance(result, JudgeResponseInvalid):
                verdicts.append(None)
                errors.append(str(result))
                continue
            actions, reasoning = result
            verdicts.append(
                Verdict(
                    actions=actions,
                    reasoning=reasoning,
                    raw=raw,
                    model=self.model,
                    prompt_version=PROMPT_VERSION,
                    latency_ms=latency_ms,
                    attempts=attempt,
                )
            )
            errors.append("")
        return BatchReply(
            verdicts=tuple(verdicts), errors=tuple(errors), raw=raw, spend=spend, shares=tuple(spend.share(weights))
        )

    def classify_noise(self, candidates: Sequence[NoiseCandidate]) -> NoiseReply:
        """One call over the noise detector's ``candidates`` (rho's "30-day test";
        ``prompts.NOISE_SYSTEM_PROMPT``): which of them are noise. Keep on doubt: only
        candidates the reply names with verdict "noise" and a reason are in
        ``NoiseReply.noise``.

        A reply that is malformed or truncated as a whole is asked again up to
        ``attempts`` times in all, then raises ``JudgeResponseInvalid``; transport errors
        raise ``JudgeUnavailable`` (``JudgeRateLimited`` for a 429), as ``judge_batch``.
        Either carries ``spend`` (``_ask``).
        """
        messages = build_noise_messages(candidates, cacheable=self._cacheable())
        ids = [c.alias for c in candidates]
        (noise, reasons), raw, spend, attempt = self._ask(messages, lambda text: parse_noise(text, ids), what="noise")
        return NoiseReply(noise=noise, reasons=reasons, raw=raw, model=self.model,
                          prompt_version=NOISE_PROMPT_VERSION, attempts=attempt, spend=spend)

    def ask_json(self, messages: list[dict[str, Any]], parse: Callable[[str], T]) -> tuple[T, Spend]:
        """One call of the part-2 stages (mining, relocation, promotion): ``parse`` turns
        the reply's text into its result or raises ``JudgeResponseInvalid``; a malformed
        or truncated reply is asked again, up to ``attempts`` calls in all (``_ask``).

        Returns ``(result, spend)``. Raises ``JudgeResponseInvalid`` (the last one),
        ``JudgeUnavailable`` or ``JudgeRateLimited``, each with the ``spend`` of every
        attempt.
        """
        result, _, spend, _ = self._ask(messages, parse, what="model")
        return result, spend

    def second_look(self, checks: Sequence[second_look.Check]) -> second_look.Reply:
        """One call over the flagged ``checks`` of a batch (``llm/second_look.py``), to the
        verify model: the model's answer per check alias. A malformed or truncated reply
        is asked again up to ``attempts`` calls in all (``_ask``), then raises
        ``JudgeResponseInvalid``; transport errors raise ``JudgeUnavailable``
        (``JudgeRateLimited`` for a 429). Either carries ``spend``.
        """
        ids = [c.alias for c in checks]
        answers, raw, spend, _ = self._ask(
            second_look.build_messages(checks),
            lambda text: second_look.parse(text, ids),
            what="second look",
            model=self.verify_model,
        )
        return second_look.Reply(answers=answers, raw=raw, model=self.verify_model, spend=spend)

    def judge(self, request: JudgeRequest) -> Verdict:
        """One cluster alone (a call of one cluster, same wire form); see ``judge_batch``."""
        reply = self.judge_batch([request])
        verdict = reply.verdicts[0]
        if verdict is None:
            error = JudgeResponseInvalid(reply.errors[0], raw=reply.raw)
            error.spend = reply.spend
            raise error
        spend = reply.spend
        return replace(verdict, tokens=spend.tokens, cost=spend.cost, llm_calls=spend.calls, spend=spend)


#: Texts per embedding request: a batch of ``EMBEDDING_BATCH_SIZE`` truths is sent in
#: requests of at most this many, under the smallest caps of the common providers (Cohere
#: 96 texts a request, Gemini 100; OpenAI 2,048).
REQUEST_TEXTS = 64


#: Said after ``WRONG_DIMENSIONS`` when litellm cannot ask the model for a width.
NO_WIDTH_PARAMETER = (
    " litellm cannot ask {model!r} for a width (it sends one, as `dimensions` or the provider's own "
    "name, only where the provider takes it: OpenAI text-embedding-3-*, Cohere, Gemini, Voyage, "
    "Bedrock Titan v2, ...); or use an offline one: \"local\" (English), \"local-multilingual\"."
)


class LiteLLMEmbedder:
    """``Embedder`` over ``litellm.embedding``, asked for 384 dimensions where the
    provider supports choosing them (OpenAI ``text-embedding-3-*`` and others, as
    litellm's own parameter mapping says: ``takes_dimensions``), in requests of at most
    ``REQUEST_TEXTS`` texts.

    Raises ``EmbeddingDimensionMismatch`` if the model answers with another size (saying
    when the provider cannot be asked for one) and ``EmbeddingError`` if a request fails
    (the vectors of the call's other requests are dropped with it).
    """

    def __init__(self, *, model: str, api_base: str | None = None) -> None:
        self.model_name = model
        self.api_base = api_base

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of ``texts``: shape ``(len(texts), 384)``, float32, in their order."""
        if not texts:
            return np.zeros((0, EMBEDDING_DIMENSIONS), dtype=np.float32)
        return np.concatenate(
            [self._request(texts[start : start + REQUEST_TEXTS]) for start in range(0, len(texts), REQUEST_TEXTS)]
        )

    def takes_dimensions(self) -> bool:
        """Whether litellm sends this model's provider the width asked for (under any of the
        providers' names for it), by litellm's own mapping of the ``dimensions`` parameter."""
        try:
            model, provider, _, _ = litellm.get_llm_provider(self.model_name, api_base=self.api_base)
            mapped = litellm.utils.get_optional_params_embeddings(
                model=model, dimensions=EMBEDDING_DIMENSIONS, custom_llm_provider=provider, drop_params=True
            )
        except (litellm.exceptions.BadRequestError, litellm.exceptions.UnsupportedParamsError):
            return False  # a provider litellm does not know: nothing is promised
        return EMBEDDING_DIMENSIONS in mapped.values()

    def _request(self, texts: Sequence[str]) -> np.ndarray:
        kwargs: dict[str, Any] = {
            "model": self.model_name,
            "input": list(texts),
            "dimensions": EMBEDDING_DIMENSIONS,
            # litellm refuses ``dimensions`` for models it does not know to support it
            # (any openai/<name> but text-embedding-3-*) instead of sending the call;
            # drop it there and let check_dimensions reject a wrong size clearly.
            "drop_params": True,
            "timeout": float(app_settings.LLM_TIMEOUT),
            "num_retries": 0,
            "max_retries": 0,
        }
        if self.api_base:
            kwargs["api_base"] = self.api_base
        try:
            response = litellm.embedding(**kwargs)
        except Exception as exc:
            raise EmbeddingError(f"Embedding model {self.model_name!r} failed: {type(exc).__name__}: {exc}") from exc
        vectors = np.array([item["embedding"] for item in response.data], dtype=np.float32)
        try:
            vectors = check_dimensions(vectors, expected_rows=len(texts), model_name=self.model_name)
        except EmbeddingDimensionMismatch as exc:
            if self.takes_dimensions():
                raise
            raise EmbeddingDimensionMismatch(str(exc) + NO_WIDTH_PARAMETER.format(model=self.model_name)) from None
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.clip(norms, 1e-12, None)
