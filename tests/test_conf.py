"""The similarity threshold's default follows the embedding model; the project reads the
environment (an empty IRIS_CONSOLIDATION_SCHEDULE_CRON turns the schedule off)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


# --- the runnable project's environment (project/settings.py) --------------------------


def _project_settings(**variables: str | None) -> list[str]:
    """The app's SCHEDULE_CRON and JUDGE as project/settings.py reads them from ``variables``
    (None: unset), in a fresh interpreter (the settings read the environment at import)."""
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRIS_CONSOLIDATION_")}
    env |= {"DJANGO_SETTINGS_MODULE": "project.settings"}
    env |= {k: v for k, v in variables.items() if v is not None}
    code = (
        "import django; django.setup(); from iris_consolidation.conf import app_settings as s; "
        "print(repr(s.SCHEDULE_CRON)); print(repr(s.JUDGE))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_an_empty_schedule_variable_turns_the_schedule_off_and_other_empty_variables_keep_defaults():
    off = _project_settings(IRIS_CONSOLIDATION_SCHEDULE_CRON="", IRIS_CONSOLIDATION_JUDGE="")
    unset = _project_settings()
    other = _project_settings(IRIS_CONSOLIDATION_SCHEDULE_CRON="0 6 * * 1")

    assert off == ["''", "'rules'"]
    assert unset == ["'0 5 * * 0'", "'rules'"]
    assert other[0] == "'0 6 * * 1'"
