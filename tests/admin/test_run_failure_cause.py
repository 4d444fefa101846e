"""A failed run says why at the top of its page (the cause, e.g. "connection refused",
not the exception class litellm wraps it in), and each failed card of an LLM judge
names its model, not the rule judge's pre-pass."""

from __future__ import annotations

import re
import socket

import pytest
from django.urls import reverse

from iris_consolidation.models import ClusterReview
from tests.incremental_support import make_pairs, run_pass

pytestmark = pytest.mark.django_db


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed on return: connecting is refused


def test_a_run_whose_model_is_unreachable_says_so_at_the_top_and_on_each_card(
    admin_client, llm_server, truth_factory, user_factory, settings
):
    make_pairs(truth_factory, user_factory("alice"), 3)
    settings.IRIS_CONSOLIDATION_LLM_API_BASE = f"http://127.0.0.1:{_dead_port()}/v1"

    run = run_pass()

    html = admin_client.get(reverse("admin:iris_consolidation_consolidationrun_change", args=[run.pk])).content.decode()
    assert run.status == "failed" and run.failed == 3
    banner = re.search(r'<div class="iris-warning-banner iris-failure-cause".*?</div>', html, re.S).group(0)
    assert "Why this run failed" in banner
    assert "openai/stub-judge failed: could not be reached: connection refused (3 clusters)" in banner
    assert html.index("iris-failure-cause") < html.index("Cluster reviews")  # at the top
    assert "InternalServerError" not in html
    failed = ClusterReview.objects.filter(run=run, outcome="failed")
    assert set(failed.values_list("model", flat=True)) == {"openai/stub-judge"}
    assert "model openai/stub-judge" in html and "model rules" not in html


def test_a_run_that_succeeded_shows_no_failure_banner(admin_client, llm_server, truth_factory, user_factory):
    make_pairs(truth_factory, user_factory("alice"), 1)

    run = run_pass()

    html = admin_client.get(reverse("admin:iris_consolidation_consolidationrun_change", args=[run.pk])).content.decode()
    assert run.status == "done" and "iris-failure-cause" not in html
