"""An operator, in a real browser, answers "why does this truth exist", previews a run
and undoes a merge, from the admin alone."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from iris_consolidation.embeddings import LOCAL_MODEL_NAME
from iris_consolidation.models import ConsolidationRun, RetiredReason, Truth
from iris_consolidation.services.queue import execution
from tests import lineage_builder as lb
from tests.conftest import vector_at

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REASONING_GEN2 = "t1 is already a merge; t2 adds nothing new about Tomas, so they merge."


def _tea(user):
    # Two spellings of one statement, close in embedding space: the rule judge merges them.
    first = Truth.objects.create(
        user=user,
        content="Drinks green tea every morning",
        embedding=vector_at(1.0, axis=7, towards=8),
        embedding_model=LOCAL_MODEL_NAME,
    )
    second = Truth.objects.create(
        user=user,
        content="drinks green tea every morning.",
        embedding=vector_at(0.97, axis=7, towards=8),
        embedding_model=LOCAL_MODEL_NAME,
    )
    return first, second


def test_operator_reads_lineage_previews_a_run_and_undoes_a_merge(logged_in, live_server, user_factory, artifacts):
    page = logged_in
    user = user_factory("alice")
    a, b, c = lb.originals(user, 3)
    # The merged text differs from every original, so each text on the page is one step's.
    ab = lb.merge(
        [a, b],
        content="Has a son, Tomas",
        run=lb.new_run(user_id=user.pk),
        reasoning="t1 and t2 both say he has a son called Tomas; one truth is enough.",
    )
    abc = lb.merge([ab, c], content="Has a son called Tomas", run=lb.new_run(user_id=user.pk), reasoning=REASONING_GEN2)
    tea = _tea(user)

    # Open a truth of generation 2 from the list, through the generation filter.
    page.goto(f"{live_server.url}/admin/iris_consolidation/truth/")
    page.get_by_role("link", name="2", exact=True).click()
    page.get_by_role("link", name="Has a son called Tomas").click()
    expect(page.locator("#content h2, #content h1").first).to_be_visible()

    # Its lineage: the judge's reasoning for each step, and the originals as judged.
    page.get_by_role("link", name="Lineage", exact=True).click()
    expect(page.locator("h1")).to_have_text(f"Lineage of truth #{abc.pk}")
    # The judge's aliases read as the truth numbers of the step's members, oldest first.
    first, second = sorted([ab, c], key=lambda t: (t.created_at, t.pk))
    named = REASONING_GEN2.replace("t1", f"#{first.pk}").replace("t2", f"#{second.pk}")
    expect(page.get_by_text(named)).to_be_visible()
    expect(page.locator("svg.iris-picture circle")).to_have_count(5)
    page.get_by_role("link", name="Expand all").click()
    expect(page.get_by_text(a.content, exact=True)).to_be_visible()
    page.screenshot(path=str(artifacts / "lineage-generation-2.png"), full_page=True)

    # A dry run from the admin for this user, then its results.
    page.goto(f"{live_server.url}/admin/iris_consolidation/truth/?q=green+tea")
    for truth in tea:
        page.locator(f"input.action-select[value='{truth.pk}']").check()
    page.select_option("select[name=action]", "queue_dry_run")
    page.get_by_role("button", name="Go").click()
    message = page.locator("ul.messagelist li.success")
    expect(message).to_contain_text("Queued a dry run for 1 user(s)")
    message.get_by_role("link").click()
    expect(page.locator(".iris-preview-banner")).to_contain_text("Preview: dry run.")
    card = page.locator("article.iris-outcome-preview")
    expect(card).to_contain_text(f"Merge #{tea[0].pk} + #{tea[1].pk}")
    expect(card).to_contain_text("would apply (preview)")
    page.screenshot(path=str(artifacts / "run-dry-run.png"), full_page=True)
    dry = ConsolidationRun.objects.get(dry_run=True)
    assert dry.trigger == "admin" and dry.merged == 1
    assert all(Truth.objects.filter(pk=t.pk).exists() for t in tea)  # a preview writes nothing

    # Undo the generation-2 merge from its change page.
    page.goto(f"{live_server.url}/admin/iris_consolidation/truth/{abc.pk}/change/")
    page.get_by_role("link", name="Undo this consolidation").click()
    page.fill("textarea[name=reason]", "Tomas is the neighbour's son, not his.")
    page.get_by_role("button", name="Yes, undo it").click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text("2 truth(s) are live again")
    expect(page.get_by_text("Tomas is the neighbour's son, not his.").first).to_be_visible()

    abc.refresh_from_db()
    ab.refresh_from_db()
    c.refresh_from_db()
    assert abc.retired_reason == RetiredReason.UNDONE
    assert ab.retired_at is None and c.retired_at is None


def test_operator_applies_a_dry_run_from_its_page(logged_in, live_server, user_factory, artifacts):
    page = logged_in
    user = user_factory("bea")
    first, second = _tea(user)
    dry = lb.new_run(dry_run=True, user_id=user.pk)
    from iris_consolidation.embeddings import get_embedder
    from iris_consolidation.llm.rules import RuleJudge

    dry.status, dry.finished_at = "pending", None
    dry.save()
    execution.run_sync(run=dry, client=RuleJudge(), embedder=get_embedder())

    page.goto(f"{live_server.url}/admin/iris_consolidation/consolidationrun/{dry.pk}/change/")
    page.get_by_role("link", name="Apply these verdicts as a real run").click()
    page.get_by_role("button", name="Apply as a real run").click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text("previewed verdict(s) of dry run")
    expect(page.locator(".iris-info-banner")).to_contain_text("applies the verdicts of dry run")
    expect(page.locator("article.iris-outcome-applied")).to_have_count(1)
    page.screenshot(path=str(artifacts / "run-applied.png"), full_page=True)

    first.refresh_from_db()
    second.refresh_from_db()
    assert first.retired_reason == RetiredReason.MERGED and second.superseded_by_id == first.superseded_by_id


def test_generation_5_lineage_stays_readable(logged_in, live_server, user_factory, artifacts):
    page = logged_in
    root, originals, _ = lb.generation_tree(user_factory("carl"), generations=5)

    page.goto(f"{live_server.url}/admin/iris_consolidation/truth/{root.pk}/lineage/")

    expect(page.locator("svg.iris-picture circle")).to_have_count(63)
    expect(page.locator(".iris-summary")).to_contain_text("Made from 32 original truths in 31 steps over 5 runs.")
    picture = page.locator("svg.iris-picture").bounding_box()
    assert picture is not None and picture["height"] < 32 * 30  # one row per original, no overlap
    page.screenshot(path=str(artifacts / "lineage-generation-5.png"), full_page=True)
    # A node of the picture leads to its step in the boxes below, even when collapsed.
    page.locator(f"svg.iris-picture a[href='#t{originals[0].pk}']").click()
    expect(page.locator(f"#t{originals[0].pk}")).to_be_in_viewport()
