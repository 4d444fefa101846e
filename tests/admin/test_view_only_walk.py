"""The view permission on truths opens the whole console for reading: a view-only staff
user who follows every link of every page reaches no page that refuses them, and a page
that does refuse (a write) answers inside the admin frame, naming the permission."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import pytest
from django.urls import reverse

from iris_consolidation.admin import base
from iris_consolidation.embeddings import LOCAL_MODEL_NAME
from iris_consolidation.models import Truth
from iris_consolidation.services.operations import undo
from tests.conftest import vector_at
from tests.helpers import rules_run

pytestmark = pytest.mark.django_db

#: Pages reached at most (every model's list, pages and filters of the demo-sized data below).
MAX_PAGES = 700
#: Distinct query strings followed per path (filters and sort orders of one list).
QUERIES_PER_PATH = 4


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href and not href.startswith(("#", "javascript:", "mailto:")):
                self.hrefs.append(href)


def _links(html: str) -> list[str]:
    parser = _Links()
    parser.feed(html)
    return parser.hrefs


@pytest.fixture
def console_data(user_factory, two_step_lineage):
    """A real run that merged, a dry run, an undone merge and a kept cluster."""
    user = two_step_lineage["user"]
    for i in range(2):
        Truth.objects.create(user=user, content=f"Drinks green tea number {i} every morning",
                             embedding=vector_at(1.0, axis=2 * i + 10, towards=2 * i + 11),
                             embedding_model=LOCAL_MODEL_NAME)
        Truth.objects.create(user=user, content=f"drinks green tea number {i} every morning.",
                             embedding=vector_at(0.97, axis=2 * i + 10, towards=2 * i + 11),
                             embedding_model=LOCAL_MODEL_NAME)
    rules_run(user, dry_run=True)
    run = rules_run(user)
    assert run.merged == 2
    merged = Truth.objects.filter(user=user, generation=1, content__startswith="Drinks green tea number 0")
    undo.undo_consolidation(truth_id=merged.get().pk, actor="operator", reason="They were two different teas.")
    return two_step_lineage


def test_view_only_staff_follow_every_link_and_meet_no_refusal(staff_client, console_data):
    client = staff_client("view_truth", username="viewer")
    seen: set[str] = set()
    per_path: dict[str, int] = {}
    queue = [("/admin/", "(start)")]
    failures: list[tuple[str, int, str]] = []
    while queue and len(seen) < MAX_PAGES:
        url, came_from = queue.pop(0)
        if url in seen:
            continue
        seen.add(url)
        response = client.get(url)
        if response.status_code != 200:
            failures.append((url, response.status_code, came_from))
            continue
        if "text/html" not in response.get("Content-Type", ""):
            continue
        for href in _links(response.content.decode()):
            target = urljoin(url, href)
            parts = urlsplit(target)
            if parts.netloc or not parts.path.startswith("/admin/") or parts.path.startswith("/admin/logout"):
                continue
            key = parts.path + ("?" + parts.query if parts.query else "")
            if key in seen:
                continue
            if parts.query:
                if per_path.get(parts.path, 0) >= QUERIES_PER_PATH:
                    continue
                per_path[parts.path] = per_path.get(parts.path, 0) + 1
            queue.append((key, url))

    assert failures == [], "\n".join(map(str, failures))
    visited = " ".join(seen)
    for page in ("consolidationrun", "clusterreview", "lineageevent", "truthchange", "/lineage/", "/history/"):
        assert page in visited, page  # the walk reached the console's pages
    assert len(seen) > 40


def test_a_refused_write_answers_in_the_admin_frame_naming_the_permission(staff_client, console_data):
    abc = console_data["abc"]
    client = staff_client("view_truth", username="viewer")

    response = client.get(reverse("admin:iris_consolidation_truth_undo", args=[abc.pk]))

    html = response.content.decode()
    assert response.status_code == 403
    assert 'id="site-name"' in html and "breadcrumbs" in html
    assert base.CHANGE_TRUTHS in html and "viewer" in html


def test_staff_without_the_truths_permission_are_told_which_one_they_need(staff_client, console_data):
    client = staff_client("view_consolidationrun", username="runs-only")

    response = client.get(reverse("admin:iris_consolidation_consolidationrun_changelist"))

    assert response.status_code == 403
    assert base.VIEW_TRUTHS in response.content.decode()
