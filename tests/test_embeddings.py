"""The local embedder's length-sorted batches give the vectors of one-by-one calls."""

from __future__ import annotations

import numpy as np

from iris_consolidation.embeddings import ENCODE_BATCH, LocalEmbedder


def test_sorted_batches_keep_the_input_order_and_the_vectors():
    texts = [
        "Likes tea",
        "Has worked as a pharmacist in Lisbon since 2019 and takes the early train on weekdays",
        "Owns a cat",
        "Is learning Japanese to talk with their cousin Kenji, who moved to Osaka last spring",
    ] * (ENCODE_BATCH // 2 + 3)  # more than two model batches of mixed lengths
    embedder = LocalEmbedder(threads=1)

    together = embedder.embed(texts)
    alone = np.stack([embedder.embed([t])[0] for t in texts[:4]])

    assert together.shape == (len(texts), 384)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    # Padding is masked out, so a text's vector does not depend on its batch.
    assert np.allclose(together[:4], alone, atol=1e-5)
    assert np.allclose(together[4:8], alone, atol=1e-5)
    assert float(together[0] @ together[1]) < 0.9
