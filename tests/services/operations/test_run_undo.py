"""Undo of a whole run: every truth it retired or merged comes back, newest step first,
through the one-step undo; steps a later change made unsafe are refused and listed."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone

from iris_consolidation.exceptions import UndoRefused
from iris_consolidation.models import ConsolidationRun, RetiredReason, Truth, TruthChange
from iris_consolidation.services.hygiene import retire
from iris_consolidation.services.operations import run_undo
from tests import lineage_builder as lb

pytestmark = pytest.mark.django_db


def _prune(truths, run):
    return retire.retire(
        truth_ids=[t.pk for t in truths],
        reason=RetiredReason.PRUNED,
        note={t.pk: "below the floor" for t in truths},
        run=run,
        actor="hygiene:prune",
    )


@pytest.fixture
def busy_run(user_factory):
    """One run that retired by noise, merged a + b into ab, superseded old by new, then
    pruned p and the merge result ab (a step on a truth an earlier step of the run made)."""
    user = user_factory("rui")
    n, a, b, p = lb.originals(user, 4)
    old = Truth.objects.create(user=user, content="Lives in Lisbon", created_at=timezone.now() - timedelta(days=9))
    new = Truth.objects.create(
        user=user, content="Moved to Berlin in May", created_at=timezone.now() - timedelta(days=2)
    )
    run = lb.new_run()
    retire.retire(
        truth_ids=[n.pk], reason=RetiredReason.NOISE, note={n.pk: "heartbeat"}, run=run, actor="hygiene:noise"
    )
    ab = lb.merge([a, b], content="Has a son named Tomas", run=run)
    lb.supersede(old, new, run=run, reasoning="t2 is a later state change that replaces t1.")
    _prune([p, ab], run)
    return {"run": run, "n": n, "a": a, "b": b, "old": old, "new": new, "p": p, "ab": ab}


def _live(truth) -> bool:
    return Truth.all_objects.get(pk=truth.pk).retired_at is None


def test_undo_of_a_run_brings_back_every_truth_it_retired_newest_step_first(busy_run):
    run = busy_run["run"]
    before = TruthChange.objects.count()
    result = run_undo.undo_run(run_id=run.pk, actor="ops", reason="the whole run was wrong")
    assert result.refused == []
    assert [o.step.kind for o in result.outcomes] == ["prune", "prune", "review", "review", "noise"]
    for key in ("n", "a", "b", "old", "new", "p"):
        assert _live(busy_run[key]), key
    ab = Truth.all_objects.get(pk=busy_run["ab"].pk)
    assert ab.retired_reason == RetiredReason.UNDONE  # made by the run: retired again, after coming back
    assert set(result.restored_ids) == {busy_run[k].pk for k in ("n", "a", "b", "old", "p", "ab")}
    # One audit row per truth brought back (and one for the merge result the undo retires).
    rows = list(TruthChange.objects.order_by("id")[before:].values_list("truth_id", "action", "actor", "reason"))
    assert sorted((t, a) for t, a, _, _ in rows) == sorted(
        [(busy_run[k].pk, "restored") for k in ("n", "a", "b", "old", "p", "ab")] + [(ab.pk, "undone")]
    )
    assert {(actor, reason) for _, _, actor, reason in rows} == {("ops", "the whole run was wrong")}


def test_a_second_undo_refuses_every_step_and_writes_nothing(busy_run):
    run = busy_run["run"]
    run_undo.undo_run(run_id=run.pk, actor="ops", reason="wrong")
    count = TruthChange.objects.count()
    again = run_undo.undo_run(run_id=run.pk, actor="ops", reason="wrong")
    assert again.undone == [] and len(again.refused) == 5
    assert TruthChange.objects.count() == count


def test_steps_a_later_change_made_unsafe_are_refused_and_listed_the_others_undone(user_factory):
    user = user_factory("ines")
    a, b, c, p, q = lb.originals(user, 5)
    run = lb.new_run()
    ab = lb.merge([a, b], content="Has a son named Tomas", run=run)
    _prune([p, q], run)
    # Since: a later run merged ab further, and an operator restored p by hand.
    abc = lb.merge([ab, c], content="Has a son called Tomas", run=lb.new_run())
    retire.restore(truth_id=p.pk, actor="ana", reason="still true")

    planned = run_undo.plan_run_undo(run=run)
    assert [(o.step.kind, o.step.truth_ids, o.done) for o in planned] == [
        ("prune", (q.pk,), True),
        ("prune", (p.pk,), False),
        ("review", (a.pk, b.pk), False),
    ]

    result = run_undo.undo_run(run_id=run.pk, actor="ops", reason="undo the run")
    refused = {o.step.label(): o.reason for o in result.refused}
    assert set(refused) == {
        f"prune of truth #{p.pk}",
        f"review #{ab.lineage_in.first().review_id} (retired #{a.pk}, #{b.pk})",
    }
    assert f"consolidated further into truth #{abc.pk}" in refused[next(k for k in refused if "review" in k)]
    assert "restored by ana" in refused[f"prune of truth #{p.pk}"]
    assert [o.step.truth_ids for o in result.undone] == [(q.pk,)]
    assert _live(q) and _live(p) and _live(abc)
    assert not _live(a) and not _live(b) and not _live(ab)  # the merge stays: undo abc first
    assert not TruthChange.objects.filter(truth=p, actor="ops").exists()


def test_a_dry_run_and_a_run_in_progress_are_refused(user_factory):
    dry = lb.new_run(dry_run=True)
    with pytest.raises(UndoRefused, match="is a dry run"):
        run_undo.undo_run(run_id=dry.pk, actor="ops", reason="x")
    running = lb.new_run()
    ConsolidationRun.objects.filter(pk=running.pk).update(status=ConsolidationRun.Status.RUNNING)
    with pytest.raises(UndoRefused, match="still in progress"):
        run_undo.undo_run(run_id=running.pk, actor="ops", reason="x")
    with pytest.raises(UndoRefused, match="nothing to undo"):
        run_undo.undo_run(run_id=lb.new_run().pk, actor="ops", reason="x")
    with pytest.raises(UndoRefused, match="Give a reason"):
        run_undo.undo_run(run_id=lb.new_run().pk, actor="ops", reason="  ")


def test_the_command_lists_each_step_and_fails_when_some_were_refused(busy_run):
    run = busy_run["run"]
    out = StringIO()
    call_command("undo_run", str(run.pk), "--reason", "wrong run", stdout=out, stderr=StringIO())
    assert f"Undone: prune of truth #{busy_run['p'].pk}; live again: #{busy_run['p'].pk}." in out.getvalue()
    assert "5 step(s) undone, 0 refused; 6 truth(s) live again." in out.getvalue()
    err = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("undo_run", str(run.pk), "--reason", "again", stdout=StringIO(), stderr=err)
    assert failed.value.returncode == 1 and "5 step(s) of run" in str(failed.value)
    assert err.getvalue().count("Refused: ") == 5
    with pytest.raises(CommandError, match="is not a run id"):
        call_command("undo_run", "nope", "--reason", "x")


def test_the_admin_confirms_then_undoes_the_run_and_needs_the_change_permission(
    busy_run, admin_client, client, user_factory
):
    from django.contrib.auth.models import Permission

    run = busy_run["run"]
    url = reverse("admin:iris_consolidation_consolidationrun_undo", args=[run.pk])
    run_page = admin_client.get(reverse("admin:iris_consolidation_consolidationrun_change", args=[run.pk]))
    assert f'href="{url}"' in run_page.content.decode()  # "Undo this run" on the run's page
    page = admin_client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert f"prune of truth #{busy_run['p'].pk}" in html and "Yes, undo the run" in html
    assert _live(busy_run["a"]) is False  # a GET changes nothing

    viewer = user_factory("viewer", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(codename__in=["view_consolidationrun", "view_truth"]))
    client.force_login(viewer)
    assert client.get(url).status_code == 403
    assert client.post(url, {"reason": "no"}).status_code == 403
    assert not _live(busy_run["p"])

    # The list's action leads to the same page.
    changelist = reverse("admin:iris_consolidation_consolidationrun_changelist")
    led = admin_client.post(changelist, {"action": "undo_selected_run", "_selected_action": [str(run.pk)]})
    assert led.status_code == 302 and led.url == url

    done = admin_client.post(url, {"reason": "the run was wrong"}, follow=True)
    assert "5 step(s), 6 truth(s) live again" in done.content.decode()
    assert all(_live(busy_run[k]) for k in ("n", "a", "b", "old", "p"))
