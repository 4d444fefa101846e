"""``iris_consolidation.api``: an assistant reads a user's live truths and starts a pass from code,
on the repository's sample, with the real embedder and the real PostgreSQL + pgvector."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from iris_consolidation import api
from iris_consolidation.exceptions import InvalidInput, LaunchFailed, UnknownUser
from iris_consolidation.models import ConsolidationRun, Truth
from iris_consolidation.services.operations import transfer

pytestmark = pytest.mark.django_db

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "demo.truths.jsonl"


@pytest.fixture
def sample(settings):
    settings.IRIS_CONSOLIDATION_JUDGE = "rules"
    transfer.load_truths(SAMPLE, create_users=True)
    return {u.username: u for u in get_user_model().objects.all()}


def test_consolidate_in_process_ends_done_and_the_query_puts_bens_cats_first(sample):
    ben = sample["ben.okafor"]

    run = api.consolidate(user="ben.okafor", sync=True)

    run.refresh_from_db()
    assert isinstance(run, ConsolidationRun) and run.status == "done" and run.users == 1 and run.merged >= 1
    assert run.dry_run is False and run.judge == "rules"
    found = api.live_truths(ben, query="What pets does Ben have?", limit=3)
    assert len(found) == 3
    assert "cats" in found[0].content, [t.content for t in found]
    assert all(t.user_id == ben.pk and t.retired_at is None for t in found)
    assert [t.distance for t in found] == sorted(t.distance for t in found)


def test_a_dry_run_changes_nothing_and_a_queued_run_is_returned_at_once(sample, django_capture_on_commit_callbacks):
    live_before = Truth.objects.count()

    dry = api.consolidate(user=sample["chloe.martin"], dry_run=True)
    queued = api.consolidate(threshold=0.5)

    assert dry.dry_run and dry.status == "done" and dry.merged >= 1
    assert Truth.objects.count() == live_before
    assert queued.execution == ConsolidationRun.Execution.QUEUED and queued.status == "running"
    assert queued.threshold == pytest.approx(0.5)


def test_consolidate_refuses_bad_input_and_starts_nothing(sample):
    with pytest.raises(UnknownUser):
        api.consolidate(user="nobody")
    with pytest.raises(LaunchFailed, match="threshold"):
        api.consolidate(threshold=1.5, sync=True)
    assert ConsolidationRun.objects.count() == 0


def test_without_a_query_newest_first_retired_never_and_unembedded_included(sample):
    ana = sample["ana.ribeiro"]
    api.consolidate(user=ana, sync=True)
    retired = set(Truth.all_objects.filter(user=ana, retired_at__isnull=False).values_list("pk", flat=True))
    assert retired  # the sample's restatements were merged
    fresh = Truth.objects.create(user=ana, content="Started learning the violin", origin="promoted")

    truths = api.live_truths(ana)

    assert truths[0] == fresh and fresh.embedding is None
    assert not retired & {t.pk for t in truths}
    assert {t.pk for t in truths} == set(Truth.objects.filter(user=ana).values_list("pk", flat=True))
    times = [t.created_at for t in truths]
    assert times == sorted(times, reverse=True)
    assert [t.pk for t in api.live_truths(ana.pk, limit=2)] == [t.pk for t in truths[:2]]


def test_a_query_ranks_a_truth_no_run_has_embedded_yet_and_never_another_users(sample):
    ana, ben = sample["ana.ribeiro"], sample["ben.okafor"]
    api.consolidate(sync=True)
    fresh = Truth.objects.create(user=ana, content="Adopted a grey kitten called Luna", origin="promoted")

    found = api.live_truths("ana.ribeiro", query="Does Ana have a cat?", limit=2)

    assert found[0] == fresh and fresh.embedding is None
    assert Truth.objects.get(pk=fresh.pk).embedding is None  # embedded for the call only
    assert all(t.user_id == ana.pk for t in found)
    everything = api.live_truths(ben, query="cats")
    assert len(everything) == Truth.objects.filter(user=ben).count()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"limit": 0}, "limit must be a positive whole number"),
        ({"limit": 2.5}, "limit must be a positive whole number"),
        ({"limit": True}, "limit must be a positive whole number"),
        ({"query": "  "}, "query must be a non-empty text"),
    ],
)
def test_live_truths_refuses_bad_arguments_in_one_line(sample, kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        api.live_truths(sample["ben.okafor"], **kwargs)


def test_live_truths_of_an_unknown_user_is_refused(sample):
    with pytest.raises(UnknownUser, match="nobody"):
        api.live_truths("nobody")


def test_add_truth_writes_a_live_audited_truth_the_next_pass_embeds_and_merges(sample):
    from iris_consolidation.models import TruthChange

    ben = sample["ben.okafor"]
    before = Truth.objects.filter(user=ben).count()

    written = api.add_truth("ben.okafor", "  Is learning to play the cello  ", kind="activity")
    again = api.add_truth(ben, "Is learning to play the cello.", origin="promoted")

    assert written.pk and written.content == "Is learning to play the cello" and written.kind == "activity"
    assert written.origin == "promoted" and written.retired_at is None and written.embedding is None
    assert Truth.objects.filter(user=ben).count() == before + 2
    change = TruthChange.objects.get(truth=written)
    assert change.action == "created" and change.actor == "api" and "api.add_truth" in change.reason
    api.consolidate(user=ben, sync=True)
    written.refresh_from_db()
    again.refresh_from_db()
    assert written.retired_at is not None and written.superseded_by_id == again.superseded_by_id is not None


def test_add_truth_refuses_bad_input_and_writes_nothing(sample):
    count = Truth.objects.count()
    with pytest.raises(InvalidInput, match="content"):
        api.add_truth("ben.okafor", "   ")
    with pytest.raises(InvalidInput, match="origin"):
        api.add_truth("ben.okafor", "Has a bike", origin="consolidated-by-me")
    with pytest.raises(UnknownUser):
        api.add_truth("nobody", "Has a bike")
    assert Truth.objects.count() == count
