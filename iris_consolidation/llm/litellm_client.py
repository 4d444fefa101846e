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
from collections.abc import Sequence
from typing import Any

import numpy as np

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-list download

import litellm  # noqa: E402
import openai  # noqa: E402  (litellm's exceptions derive from the OpenAI client's)

litellm.suppress_debug_info = True  # no "Give Feedback" banners on the operator's terminal

from ..conf import app_settings  # noqa: E402
from ..exceptions import (  # noqa: E402
    EmbeddingError,
    JudgeMisconfigured,
    JudgeRateLimited,
    JudgeResponseInvalid,
    JudgeUnavailable,
)
from .base import JudgeRequest, Verdict  # noqa: E402
from .parsing import parse_verdict  # noqa: E402
from .prompts import PROMPT_VERSION, build_messages  # noqa: E402

logger = logging.getLogger(__name__)

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


class LiteLLMJudge:
    """``JudgeClient`` over ``litellm.completion``: one call per cluster, JSON output.

    A malformed or truncated reply is asked again up to ``attempts`` times in all, then
    raises ``JudgeResponseInvalid``. Transport, auth and timeout errors raise
    ``JudgeUnavailable``; a 429 raises ``JudgeRateLimited`` with the provider's wait.
    """

    def __init__(self, *, model: str, api_base: str | None, timeout: float, attempts: int) -> None:
        self.model = model
        self.api_base = api_base or None
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.name = f"llm:{model}"
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
        )
        _check_environment(judge.model, judge.api_base)
        _warm_up(judge.model)
        return judge

    def _json_mode(self) -> bool:
        """Whether the provider takes ``response_format`` (JSON output mode); the reply
        is parsed strictly either way."""
        try:
            return "response_format" in (litellm.get_supported_openai_params(model=self.model) or [])
        except Exception:  # unknown provider: send plain text and parse strictly
            return False

    def _complete(self, messages: list[dict[str, str]]) -> Any:
        kwargs: dict[str, Any] = {
            "model": self.model,
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
        try:
            return litellm.completion(**kwargs)
        except litellm.RateLimitError as exc:
            raise JudgeRateLimited(f"Rate limited by {self.model}: {exc}", retry_after=_retry_after(exc)) from exc
        except (litellm.Timeout, litellm.APIConnectionError) as exc:
            raise JudgeUnavailable(f"{self.model} did not answer: {type(exc).__name__}") from exc
        except litellm.AuthenticationError as exc:
            raise JudgeUnavailable(f"{self.model} refused the credentials (authentication error).") from exc
        except litellm.exceptions.APIError as exc:  # 500s, bad gateway, ...
            raise JudgeUnavailable(f"{self.model} failed: {type(exc).__name__}") from exc
        except openai.OpenAIError as exc:  # every other status litellm maps (500, 400, ...)
            raise JudgeUnavailable(f"{self.model} failed: {type(exc).__name__}") from exc

    def judge(self, request: JudgeRequest) -> Verdict:
        messages = build_messages(request)
        tokens = 0
        cost = 0.0
        started = time.monotonic()
        last_error: JudgeResponseInvalid | None = None
        for attempt in range(1, self.attempts + 1):
            response = self._complete(messages)
            usage = getattr(response, "usage", None)
            tokens += int(getattr(usage, "total_tokens", 0) or 0)
            try:
                cost += float(litellm.completion_cost(completion_response=response) or 0.0)
            except Exception:  # no price for this model: cost stays unknown (0)
                pass
            choice = response.choices[0]
            raw = choice.message.content or ""
            try:
                if choice.finish_reason == "length":
                    raise JudgeResponseInvalid(TRUNCATED, raw=raw)
                actions, reasoning = parse_verdict(raw)
            except JudgeResponseInvalid as exc:
                last_error = exc
                logger.warning("judge reply invalid (attempt %d/%d): %s", attempt, self.attempts, exc)
                continue
            return Verdict(
                actions=actions,
                reasoning=reasoning,
                raw=raw,
                model=self.model,
                prompt_version=PROMPT_VERSION,
                tokens=tokens,
                cost=cost,
                latency_ms=int((time.monotonic() - started) * 1000),
                llm_calls=attempt,
                attempts=attempt,
            )
        assert last_error is not None
        last_error.llm_calls = self.attempts  # type: ignore[attr-defined]
        raise last_error


class LiteLLMEmbedder:
    """``Embedder`` over ``litellm.embedding``, asked for 384 dimensions where the
    provider supports choosing them (OpenAI ``text-embedding-3-*`` and others).

    Raises ``EmbeddingDimensionMismatch`` if the model answers with another size and
    ``EmbeddingError`` if the call fails.
    """

    def __init__(self, *, model: str, api_base: str | None = None) -> None:
        self.model_name = model
        self.api_base = api_base

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from ..embeddings import check_dimensions
        from ..models import EMBEDDING_DIMENSIONS

        if not texts:
            return np.zeros((0, EMBEDDING_DIMENSIONS), dtype=np.float32)
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
        vectors = check_dimensions(vectors, expected_rows=len(texts), model_name=self.model_name)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.clip(norms, 1e-12, None)
