"""A superuser's whole console after real passes: every page reachable by a link (lists,
change pages, add pages, each custom page linked from them: lineage, history, undo,
apply, cancel, retry) answers without an error, and no page shows an operator the
judge's call-local labels (``t9``): truths are named by number (``#1642``).

The passes are real: an LLM judge through the scripted OpenAI-compatible server (so its
reasons and reasoning carry the call's labels), a dry run, an undo, a run whose model
could not be reached, and a cancelled run."""

from __future__ import annotations

import re
import socket
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import pytest

from iris_consolidation.models import ConsolidationRun, Truth
from iris_consolidation.services.operations import undo
from iris_consolidation.services.queue import cancel
from tests.helpers import merge_dict, supersede_dict, waiting_run
from tests.incremental_support import make_pairs, run_pass

pytestmark = pytest.mark.django_db

#: Pages reached at most; distinct query strings followed per path (filters, sort orders).
MAX_PAGES = 900
QUERIES_PER_PATH = 3
#: A judge's call-local label as a word of operator text.
LABEL = re.compile(r"\bt\d+\b")
#: Elements whose text is a stored record quoted verbatim, not the console's words: the
#: model's raw reply (the review page's collapsed "raw reply" field).
VERBATIM = ("field-raw_response",)


class _Page(HTMLParser):
    """Links and visible text of a page (scripts, styles and verbatim records left out)."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.text: list[str] = []
        self._stack: list[bool] = []  # per open element: hidden (script, style, verbatim)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "a" and (href := values.get("href")) and not href.startswith(("#", "javascript:", "mailto:")):
            self.hrefs.append(href)
        if tag in self.VOID:
            return
        classes = (values.get("class") or "").split()
        hidden = tag in ("script", "style") or any(c in VERBATIM for c in classes)
        self._stack.append(hidden or (bool(self._stack) and self._stack[-1]))

    def handle_endtag(self, tag: str) -> None:
        if tag not in self.VOID and self._stack:
            self._stack.pop()

    def handle_data(self, data: str) -> None:
        if not (self._stack and self._stack[-1]) and data.strip():
            self.text.append(data.strip())


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed on return: connecting is refused


@pytest.fixture
def real_passes(llm_server, truth_factory, user_factory, settings):
    """A real LLM pass (merges and a supersede with labelled reasons), a dry run, an undo,
    a run whose model was unreachable, a cancelled run."""
    alice, bob, carol = user_factory("alice"), user_factory("bob"), user_factory("carol")
    pairs = make_pairs(truth_factory, alice, 3)
    changed = pairs[1][1]  # a change of pair 1's fact, which the judge supersedes
    changed.content = f"{pairs[1][0].content} no longer: now moved to b"
    changed.save(update_fields=["content"])
    make_pairs(truth_factory, bob, 2, prefix="item")
    llm_server.second_looks = "confirm"

    def handler(payload):
        entries = []
        for cluster in llm_server.clusters_of({"json": payload}):
            ids = [t["id"] for t in cluster["truths"]]
            if any("now moved" in t["content"] for t in cluster["truths"]):
                action = supersede_dict(ids[:-1], ids[-1], f"{ids[-1]} is newer than {ids[0]}; it replaces it.")
            else:
                text = cluster["truths"][0]["content"] + " and b"
                action = merge_dict(ids, text, f"{ids[0]} and {ids[1]} state one fact.")
            entries.append({"id": cluster["id"], "actions": [action], "reasoning": f"{' and '.join(ids)} overlap."})
        from tests import llm_stub

        return llm_stub.clusters_reply(entries)

    llm_server.handler = handler
    run_pass(dry_run=True, user_id=bob.pk)
    real = run_pass()
    assert real.merged >= 2 and real.superseded >= 1, (real.merged, real.superseded, real.rejected)
    merged = Truth.objects.filter(user=alice, generation=1).order_by("pk").first()
    undo.undo_consolidation(truth_id=merged.pk, actor="operator", reason="They were different facts after all.")

    make_pairs(truth_factory, carol, 1, prefix="thing", start=7)
    settings.IRIS_CONSOLIDATION_LLM_API_BASE = f"http://127.0.0.1:{_dead_port()}/v1"
    failed = run_pass(user_id=carol.pk)
    assert failed.failed >= 1

    waiting = waiting_run(user_factory("dave"))
    cancel.cancel_waiting_run(run_id=waiting.pk, actor="operator")
    return {"real": real, "failed": failed}


def test_a_superuser_reaches_every_page_without_an_error_and_never_sees_a_label(admin_client, real_passes):
    seen: set[str] = set()
    per_path: dict[str, int] = {}
    queue = [("/admin/", "(start)")]
    failures: list[tuple[str, int, str]] = []
    labelled: dict[str, list[str]] = {}
    while queue and len(seen) < MAX_PAGES:
        url, came_from = queue.pop(0)
        if url in seen:
            continue
        seen.add(url)
        response = admin_client.get(url)
        if response.status_code >= 400:
            failures.append((url, response.status_code, came_from))
            continue
        if response.status_code >= 300:
            # A redirect (the live settings list to its one record, a missing object to
            # the list with a message) is followed: where it lands must answer too.
            queue.append((response["Location"], url))
            continue
        if "text/html" not in response.get("Content-Type", ""):
            continue
        page = _Page()
        page.feed(response.content.decode())
        found = sorted({m for line in page.text for m in LABEL.findall(line)})
        if found:
            labelled[url] = [line for line in page.text if LABEL.search(line)][:3]
        for href in page.hrefs:
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
    by_path = {urlsplit(url).path: lines for url, lines in labelled.items()}
    assert by_path == {}, "\n".join(f"{path}: {lines}" for path, lines in sorted(by_path.items()))
    visited = " ".join(seen)
    for page in ("/add/", "/undo/", "/lineage/", "/history/", "lineageevent/", "clusterreview/", "truthchange/"):
        assert page in visited, page  # the crawl reached the console's pages
    assert ConsolidationRun.objects.filter(status="cancelled").exists()


def test_rows_recorded_with_the_judges_labels_are_shown_with_truth_numbers(
    admin_client, llm_server, truth_factory, user_factory
):
    """Lineage events and audit rows written before reasons carried truth numbers kept the
    call's labels: the pages number them from the review's snapshot."""
    from django.urls import reverse

    from iris_consolidation.models import LineageEvent, TruthChange

    ((a, b),) = make_pairs(truth_factory, user_factory("alice"), 1)
    llm_server.second_looks = "confirm"
    from tests import llm_stub

    llm_server.script = [llm_stub.verdict([merge_dict(["t1", "t2"], "fact 0 a and b", "x")])]
    run_pass()
    event = LineageEvent.objects.filter(source=a).get()
    LineageEvent.objects.filter(review=event.review).update(reason="t1 and t2 state one fact.")
    TruthChange.objects.filter(review=event.review).update(reason="t1 and t2 state one fact.")
    numbered = f"#{a.pk} and #{b.pk} state one fact."
    pages = [
        reverse("admin:iris_consolidation_lineageevent_change", args=[event.pk]),
        reverse("admin:iris_consolidation_truthchange_changelist"),
        reverse("admin:iris_consolidation_truthchange_change", args=[TruthChange.objects.filter(truth=a).last().pk]),
        reverse("admin:iris_consolidation_truth_history", args=[a.pk]),
    ]

    for url in pages:
        page = _Page()
        page.feed(admin_client.get(url).content.decode())
        text = " ".join(page.text)
        assert numbered in text, url
        assert not LABEL.search(text), (url, LABEL.findall(text))
