"""How the readings of two truths that share no word separate labelled same and different pairs.

Usage (from the repository root):

    python benchmarks/unshared_pairs.py [--pairs FILE] [--thresholds F ...]

Reads a pairs file (``{"a", "b", "label": "same"|"different"}`` lines, by default the shared
``personachat_revised.pairs.jsonl``), keeps the pairs that share no content word, name or number
(``relations.share``: what the validator's chain rule, ``side_by_side``, sees), and counts the
same and different pairs each reading holds: the polarity differs (``text.polarity_key``), one
attribute of the person in common (``attributes_of``), both (``relations.defines``), and the
configured embedder's cosine similarity at each threshold. Reads no database; loads the embedder.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
SHARED_DATA = Path(os.environ.get("IRIS_SHARED_DIR") or ROOT.parent / "shared") / "data"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=str(SHARED_DATA / "personachat_revised.pairs.jsonl"))
    parser.add_argument("--thresholds", type=float, nargs="*", default=[0.45, 0.5, 0.55, 0.6, 0.65])
    args = parser.parse_args()

    import django

    django.setup()
    import numpy as np

    from iris_consolidation import text
    from iris_consolidation.embeddings import get_embedder
    from iris_consolidation.services.pipeline.relations import defines, share
    from iris_consolidation.text.attributes import attributes_of

    rows = [json.loads(line) for line in Path(args.pairs).read_text().splitlines() if line.strip()]
    unshared = [r for r in rows if not share(r["a"], r["b"], known=text.known_names([r["a"], r["b"]]))]
    vectors = get_embedder().embed([t for r in unshared for t in (r["a"], r["b"])])
    cosines = [float(np.dot(vectors[2 * i], vectors[2 * i + 1])) for i in range(len(unshared))]
    readings = {
        "polarity differs": [text.polarity_key(r["a"]) != text.polarity_key(r["b"]) for r in unshared],
        "one attribute": [bool(attributes_of(r["a"]) & attributes_of(r["b"])) for r in unshared],
        "defines (both)": [defines(r["a"], r["b"]) for r in unshared],
    }
    for threshold in args.thresholds:
        readings[f"cosine >= {threshold:.2f}"] = [c >= threshold for c in cosines]
    same = [r["label"] == "same" for r in unshared]
    print(f"{len(unshared)} of {len(rows)} pairs share no word: {sum(same)} same, {len(same) - sum(same)} different")
    print(f"{'reading':<18} {'same':>6} {'different':>10}")
    for name, held in readings.items():
        hits_same = sum(1 for h, s in zip(held, same, strict=True) if h and s)
        hits_different = sum(1 for h, s in zip(held, same, strict=True) if h and not s)
        print(f"{name:<18} {hits_same:>6} {hits_different:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
