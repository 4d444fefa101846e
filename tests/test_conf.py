"""The similarity threshold's default follows the embedding model."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from iris_consolidation import conf
from iris_consolidation.conf import app_settings


def test_local_model_gets_its_measured_threshold(settings):
    settings.IRIS_CONSOLIDATION_EMBEDDING_MODEL = "local"

    assert app_settings.SIMILARITY_THRESHOLD == conf.THRESHOLD_BY_EMBEDDING_MODEL["local"]


def test_remote_embedding_model_keeps_iris_threshold(settings):
    settings.IRIS_CONSOLIDATION_EMBEDDING_MODEL = "openai/text-embedding-3-small"

    assert app_settings.SIMILARITY_THRESHOLD == conf.REMOTE_EMBEDDING_THRESHOLD == 0.75


def test_a_set_threshold_wins_whatever_the_model(settings):
    settings.IRIS_CONSOLIDATION_EMBEDDING_MODEL = "local"
    settings.IRIS_CONSOLIDATION_SIMILARITY_THRESHOLD = 0.8

    assert app_settings.SIMILARITY_THRESHOLD == 0.8
    settings.IRIS_CONSOLIDATION_EMBEDDING_MODEL = "openai/text-embedding-3-small"
    assert app_settings.SIMILARITY_THRESHOLD == 0.8


def test_the_local_default_is_lower_than_iris_threshold():
    # The measured curve (docs/configuration.md, "Choosing the threshold"): restatements sit below 0.75
    # with all-MiniLM-L6-v2, so its default must be lower than the remote one.
    assert conf.default_threshold("local") < conf.default_threshold("any/remote-model") == 0.75


@pytest.mark.django_db
def test_system_check_accepts_the_derived_default(settings):
    settings.IRIS_CONSOLIDATION_EMBEDDING_MODEL = "openai/text-embedding-3-small"

    call_command("check")  # raises SystemCheckError on iris_consolidation.E001
