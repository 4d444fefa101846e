"""How the LLM judge and the remote embedder report what the server does wrong,
through litellm against the stub (no retries of their own: the queue retries)."""

from __future__ import annotations

import numpy as np
import pytest

from iris_consolidation.embeddings import WRONG_DIMENSIONS
from iris_consolidation.exceptions import EmbeddingDimensionMismatch, JudgeUnavailable
from iris_consolidation.llm import get_judge_client
from iris_consolidation.llm.litellm_client import NO_WIDTH_PARAMETER, REQUEST_TEXTS, LiteLLMEmbedder
from tests import llm_stub
from tests.helpers import judge_request

#: Two wordings of one job (the request is frozen, so tests share it).
NURSES = judge_request("Works as a nurse", "Is a nurse")


@pytest.mark.parametrize("status", [400, 401, 403, 404, 500, 502, 503])
def test_http_error_is_reported_as_judge_unavailable(llm_server, status):
    llm_server.script = [llm_stub.error(status)]

    with pytest.raises(JudgeUnavailable) as info:
        get_judge_client().judge(NURSES)

    assert str(info.value).startswith("openai/stub-judge ")
    assert "test-key-not-secret" not in str(info.value)
    assert len(llm_server.chat_requests()) == 1


def test_a_server_that_does_not_answer_in_time_is_unavailable(llm_server, settings):
    settings.IRIS_CONSOLIDATION_LLM_TIMEOUT = 0.5
    llm_server.script = [llm_stub.hang(2.0)]

    with pytest.raises(JudgeUnavailable, match="did not answer"):
        get_judge_client().judge(NURSES)


def test_malformed_reply_then_good_reply_counts_two_calls(llm_server):
    llm_server.script = [llm_stub.text("Sure! Here is my answer: merge them."), llm_stub.verdict([])]

    verdict = get_judge_client().judge(NURSES)

    assert (verdict.actions, verdict.attempts, verdict.llm_calls, verdict.tokens) == ((), 2, 2, 140)


def test_embedder_asks_text_embedding_3_models_for_384_dimensions(llm_server):
    embedder = LiteLLMEmbedder(model="openai/text-embedding-3-small", api_base=llm_server.url)

    vectors = embedder.embed(["Likes tea", "Works as a nurse"])

    (request,) = llm_server.requests
    assert request["json"]["dimensions"] == 384
    assert request["json"]["input"] == ["Likes tea", "Works as a nurse"]
    assert vectors.shape == (2, 384)
    assert np.linalg.norm(vectors, axis=1) == pytest.approx([1.0, 1.0])


def test_embedder_sends_a_long_batch_in_requests_of_at_most_request_texts(llm_server):
    texts = [f"Fact number {i}" for i in range(2 * REQUEST_TEXTS + 22)]
    embedder = LiteLLMEmbedder(model="openai/text-embedding-3-small", api_base=llm_server.url)

    vectors = embedder.embed(texts)
    requests = list(llm_server.requests)
    one_by_one = np.concatenate([embedder.embed([text]) for text in texts[::37]])

    assert [len(r["json"]["input"]) for r in requests] == [REQUEST_TEXTS, REQUEST_TEXTS, 22]
    assert [text for r in requests for text in r["json"]["input"]] == texts
    assert vectors.shape == (len(texts), 384)
    assert np.array_equal(vectors[::37], one_by_one)


def test_embedder_refuses_vectors_of_another_size_saying_the_model_cannot_be_asked_for_384(llm_server):
    llm_server.embedding_dimensions = 1536
    embedder = LiteLLMEmbedder(model="openai/any-embedder", api_base=llm_server.url)

    with pytest.raises(EmbeddingDimensionMismatch) as info:
        embedder.embed(["Likes tea"])

    (request,) = llm_server.requests
    assert "dimensions" not in request["json"]  # litellm drops what the model cannot take
    assert str(info.value) == WRONG_DIMENSIONS.format(
        model="openai/any-embedder", got=1536, expected=384
    ) + NO_WIDTH_PARAMETER.format(model="openai/any-embedder")
    assert "litellm cannot ask 'openai/any-embedder' for a width" in str(info.value)


def test_a_model_asked_for_384_that_answers_another_size_is_refused_plainly(llm_server):
    llm_server.embedding_dimensions = 1536
    embedder = LiteLLMEmbedder(model="openai/text-embedding-3-small", api_base=llm_server.url)

    with pytest.raises(EmbeddingDimensionMismatch) as info:
        embedder.embed(["Likes tea"])

    (request,) = llm_server.requests
    assert request["json"]["dimensions"] == 384
    assert str(info.value) == WRONG_DIMENSIONS.format(model="openai/text-embedding-3-small", got=1536, expected=384)


@pytest.mark.parametrize(
    ("model", "takes"),
    [
        ("openai/text-embedding-3-large", True),
        ("cohere/embed-multilingual-v3.0", True),
        ("gemini/text-embedding-004", True),
        ("openai/text-embedding-ada-002", False),
        ("mistral/mistral-embed", False),
        ("no-such-provider/any", False),
    ],
)
def test_litellm_says_which_providers_take_a_width(model, takes):
    assert LiteLLMEmbedder(model=model).takes_dimensions() is takes


def test_a_refused_connection_names_its_cause_not_the_wrapper_class(llm_server, settings):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed on leaving: connecting is refused
    settings.IRIS_CONSOLIDATION_LLM_API_BASE = f"http://127.0.0.1:{port}/v1"

    with pytest.raises(JudgeUnavailable) as info:
        get_judge_client().judge(NURSES)

    assert str(info.value) == "openai/stub-judge failed: could not be reached: connection refused"
