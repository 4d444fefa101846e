"""The lineage view: content, picture, permissions, unknown ids, bounded queries."""

from __future__ import annotations

import re

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from iris_consolidation.admin.base import MISSING_OBJECT
from iris_consolidation.models import LineageEvent, Truth
from tests import lineage_builder as lb

pytestmark = pytest.mark.django_db


def lineage_url(pk):
    return reverse("admin:iris_consolidation_truth_lineage", args=[pk])


def test_lineage_shows_each_step_with_reasoning_model_prompt_and_run(admin_client, two_step_lineage):
    abc = two_step_lineage["abc"]
    first, second = two_step_lineage["runs"]

    response = admin_client.get(lineage_url(abc.pk))

    assert response.status_code == 200
    html = response.content.decode()
    assert f"Lineage of truth #{abc.pk}" in html
    # The judge's aliases read as the truth numbers of each step's members (oldest first).
    a, b, c, ab = (two_step_lineage[k] for k in ("a", "b", "c", "ab"))
    first_two = sorted([ab, c], key=lambda t: (t.created_at, t.pk))
    assert (
        f"#{first_two[0].pk} is already a merge; #{first_two[1].pk} adds nothing new about Tomas, so they merge."
        in html
    )
    assert f"#{a.pk} and #{b.pk} both say he has a son called Tomas; one truth is enough." in html
    assert "t1 and t2" not in html
    assert lb.MODEL in html and lb.PROMPT_VERSION in html
    for run in (first, second):
        assert reverse("admin:iris_consolidation_consolidationrun_change", args=[run.pk]) in html
    for original in ("a", "b", "c"):
        assert two_step_lineage[original].content in html
    text = " ".join(html.split())
    assert "Made from <strong>3</strong> original truths in <strong>2</strong> steps over 2 runs." in text


def test_lineage_shows_source_text_as_the_judge_saw_it(admin_client, two_step_lineage):
    a = two_step_lineage["a"]
    judged = a.content
    Truth.all_objects.filter(pk=a.pk).update(content="Edited after the merge by an operator")

    html = admin_client.get(lineage_url(two_step_lineage["abc"].pk)).content.decode()

    assert judged in html
    assert "Edited after the merge by an operator" in html  # flagged as the current text
    assert "edited since" in html


def test_lineage_draws_the_ancestry_as_an_svg_with_one_node_per_truth(admin_client, user_factory):
    root, firsts, _ = lb.generation_tree(user_factory(), generations=5)

    html = admin_client.get(lineage_url(root.pk)).content.decode()

    svg = html[html.index('<svg class="iris-picture"') : html.index("</svg>", html.index('<svg class="iris-picture"'))]
    assert len(re.findall(r"<circle ", svg)) == 63  # 32 originals + 31 merges
    assert len(re.findall(r"<path ", svg)) == 62
    for original in firsts:
        assert f'href="#t{original.pk}"' in svg
    # Nothing is loaded from another host (a random CSRF token may spell "cdn").
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html, flags=re.I)


def test_lineage_of_a_retired_truth_shows_what_it_became(admin_client, two_step_lineage):
    a, ab, abc = two_step_lineage["a"], two_step_lineage["ab"], two_step_lineage["abc"]

    html = admin_client.get(lineage_url(a.pk)).content.decode()

    assert "What it became" in html
    assert f"#{a.pk} merged into" in html and f'{lineage_url(ab.pk)}">#{ab.pk}' in html
    assert f"#{ab.pk} merged into" in html and f'{lineage_url(abc.pk)}">#{abc.pk}' in html
    assert "This truth is an original" in html


def test_staff_with_view_permission_sees_lineage_without_undo(staff_client, two_step_lineage):
    client = staff_client("view_truth")

    response = client.get(lineage_url(two_step_lineage["abc"].pk))

    assert response.status_code == 200
    assert "Undo this consolidation" not in response.content.decode()


def test_staff_without_view_permission_gets_403(staff_client, two_step_lineage):
    client = staff_client("view_consolidationrun")

    assert client.get(lineage_url(two_step_lineage["abc"].pk)).status_code == 403


def test_anonymous_is_sent_to_the_login_page(client, two_step_lineage):
    response = client.get(lineage_url(two_step_lineage["abc"].pk))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


@pytest.mark.parametrize("bad_id", ["999999", "not-a-number"])
def test_unknown_truth_is_a_404(admin_client, bad_id):
    response = admin_client.get(lineage_url(bad_id))

    assert response.status_code == 404
    assert list(get_messages(response.wsgi_request)) == []
    assert MISSING_OBJECT.format(name="Truth", key=bad_id) == response.context["message"]


def test_lineage_never_shows_another_users_truth(admin_client, two_step_lineage, user_factory):
    stranger = Truth.objects.create(user=user_factory("bob"), content="Bob keeps a diary about Lisbon")
    LineageEvent.objects.create(action="merge", source=stranger, result=two_step_lineage["abc"], reason="corrupt")

    html = admin_client.get(lineage_url(two_step_lineage["abc"].pk)).content.decode()

    assert "Bob keeps a diary" not in html
    assert f"#t{stranger.pk}" not in html


def test_lineage_query_count_does_not_grow_with_the_tree(admin_client, user_factory, django_assert_max_num_queries):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    small, _, _ = lb.generation_tree(user_factory(), generations=1)
    big, _, _ = lb.generation_tree(user_factory(), generations=5)

    with CaptureQueriesContext(connection) as small_queries:
        assert admin_client.get(lineage_url(small.pk)).status_code == 200
    with django_assert_max_num_queries(8):
        assert admin_client.get(lineage_url(big.pk)).status_code == 200
    with CaptureQueriesContext(connection) as big_queries:
        admin_client.get(lineage_url(big.pk))

    assert len(big_queries) == len(small_queries)
