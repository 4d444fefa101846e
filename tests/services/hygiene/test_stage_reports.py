"""Reports that add up when the stages around the judge call a model: clusters per judge
call, a supersede's "was:" line, the truths a pass mined, what relocation and promotion
asked, a merged truth's kind and evidence (and their export)."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from iris_consolidation import inventory_display
from iris_consolidation.embeddings import get_embedder
from iris_consolidation.llm import get_judge_client
from iris_consolidation.models import ConsolidationRun, Origin, Truth
from iris_consolidation.services.hygiene import reports, stages
from iris_consolidation.services.pipeline import bookkeeping
from iris_consolidation.services.queue import execution
from iris_consolidation.services.run import inventory
from tests import llm_stub
from tests.conftest import vector_at
from tests.helpers import supersede_dict
from tests.incremental_support import make_pairs, run_pass
from tests.services.hygiene.test_mining import make_session

pytestmark = pytest.mark.django_db

HISTORY = ("Moved from Lisbon to Porto in 2019 for a job at the port authority, then to Berlin in 2021 when "
           "the company opened an office there, and finally to Munich in 2023 after a promotion to lead the "
           "logistics team; kept the flat in Porto, which is rented out to students, and visits twice a year.")


def part2(payload):
    """The scripted model: every part-2 call answered with nothing to do, judge calls kept."""
    content = payload["messages"][-1]["content"]
    if "<data>" in content:
        data = llm_stub.StubLLMServer.data_of({"json": payload})
        if "session" in data:
            return llm_stub.text(json.dumps({"truths": []}))
        key = "rules" if "standing instruction" in payload["messages"][0]["content"].lower() else "notes"
        return llm_stub.text(json.dumps({key: []}))
    return llm_stub.verdict()


def test_clusters_per_call_divides_by_the_judges_calls_only(llm_server, truth_factory, user_factory, settings):
    user = user_factory()
    make_pairs(truth_factory, user, 2)
    truth_factory("Wants answers in British English", user=user, corroborations=4,
                  embedding=vector_at(1.0, axis=100, towards=101))
    llm_server.handler = part2

    run = run_pass()

    # One judge call of two clusters, one promotion call.
    assert (run.llm_calls, run.stage_calls, run.model_clusters) == (2, 1, 2)
    assert inventory_display.judge_calls(run) == 1
    fields = dict(item.split("=") for item in inventory_display.spend_fields(run).split())
    assert (fields["llm_calls"], fields["judge_calls"], fields["stage_calls"]) == ("2", "1", "1")
    assert fields["clusters_per_call"] == "2.00"


def test_a_supersedes_was_line_is_the_retired_truth_not_the_survivor(llm_server, truth_factory, user_factory):
    user = user_factory()
    now = timezone.now()
    truth_factory("Works at the bakery on Rua Augusta", user=user, created_at=now - timedelta(days=30),
                  embedding=vector_at(1.0))
    truth_factory("No longer works at the bakery on Rua Augusta; works at the library now", user=user,
                  created_at=now - timedelta(days=1), embedding=vector_at(0.9))
    llm_server.script = [llm_stub.verdict([supersede_dict(["t1"], "t2", "changed jobs: the newer one says so")])]

    run = run_pass()

    assert run.superseded == 1, run.inventory["changes"]
    change = run.inventory["changes"][0]
    assert change["content"] == "No longer works at the bakery on Rua Augusta; works at the library now"
    assert change["sources"] == ["Works at the bakery on Rua Augusta"]
    lines = inventory_display.report_lines(run, verbosity=2)
    assert "      was: Works at the bakery on Rua Augusta" in lines
    assert not any(line.startswith("      was: No longer") for line in lines)


def test_truths_counts_the_truths_the_pass_mined(user_factory, truth_factory):
    ana = user_factory("ana")
    truth_factory("Has a dog named Rex", user=ana)
    make_session(ana, "s1", at=timezone.now() - timedelta(hours=2), messages=[
        ("user", "Nice! I live in Porto."), ("user", "Actually, I'm vegetarian."),
    ])
    out = io.StringIO()
    call_command("consolidate_truths", "--sync", "--since", "7d", verbosity=0, stdout=out)

    run = ConsolidationRun.objects.get()
    assert Truth.objects.filter(user=ana, source="session:s1").count() == 2
    assert run.truths == 3
    assert " truths=3 " in out.getvalue().splitlines()[-1]


def _asked(run, stage):
    return inventory_display.asked_line(reports.summarise(run)[stage])


def started(run):
    run.started_at = timezone.now()
    run.save(update_fields=["started_at"])
    return run


def test_relocation_and_promotion_say_what_the_model_was_asked(llm_server, truth_factory, user_factory,
                                                               run_factory):
    asked, never, offline = user_factory(), user_factory(), user_factory()
    truth_factory(HISTORY, user=asked)
    truth_factory("Wants answers in British English", user=asked, corroborations=4)
    truth_factory("Has two cats", user=never)
    truth_factory(HISTORY, user=offline)
    llm_server.handler = part2
    client = get_judge_client("llm")
    run, rules_run = started(run_factory()), started(run_factory())
    for user in (asked, never):
        stages.run_relocate(run, user.pk, client=client)
        stages.run_promote(run, user.pk, client=client)
    stages.run_relocate(rules_run, offline.pk, client=None)

    assert _asked(run, "relocate") == "the model was asked about 1 truth in 1 call (1 of 2 users)"
    assert _asked(run, "promote") == "the model was asked about 1 truth in 1 call (1 of 2 users)"
    assert _asked(rules_run, "relocate") == "the model was not asked: no LLM judge, the rule decided"
    assert len(llm_server.chat_requests()) == 2

    # A user whose one candidate the model was never asked about reads differently from one asked.
    lone = started(run_factory(user_id=never.pk))
    stages.run_relocate(lone, never.pk, client=client)
    assert _asked(lone, "relocate") == "the model was not asked: no candidate"


def test_a_merged_truths_kind_follows_a_stated_rule_not_set_order():
    now = timezone.now()

    def truth(kind, days, pk):
        return Truth(pk=pk, kind=kind, created_at=now - timedelta(days=days))

    # A tie between the default "fact" and another kind: the other kind, in either order.
    assert bookkeeping.merged_kind([truth("fact", 2, 1), truth("preference", 1, 2)]) == "preference"
    assert bookkeeping.merged_kind([truth("preference", 2, 1), truth("fact", 1, 2)]) == "preference"
    # The most common kind wins.
    assert bookkeeping.merged_kind([truth("fact", 3, 1), truth("fact", 2, 2), truth("preference", 1, 3)]) == "fact"
    # A tie without "fact": the newest source's kind among the tied ones.
    tie = [truth("instruction", 1, 1), truth("preference", 2, 2)]
    assert bookkeeping.merged_kind(tie) == "instruction"
    assert bookkeeping.merged_kind(list(reversed(tie))) == "instruction"


def test_a_merge_keeps_every_sources_evidence_and_export_writes_it(llm_server, truth_factory, user_factory):
    user = user_factory("ana")
    now = timezone.now()
    truth_factory("Is vegetarian", user=user, kind="fact", origin=Origin.PROMOTED, evidence=["s1:2", "s1:3"],
                  created_at=now - timedelta(days=2), embedding=vector_at(1.0))
    truth_factory("Is a vegetarian", user=user, kind="preference", origin=Origin.PROMOTED,
                  evidence=["s1:3", "s2:1"], created_at=now - timedelta(days=1), embedding=vector_at(0.9))
    llm_server.script = [llm_stub.verdict([{"action": "merge", "ids": ["t1", "t2"],
                                            "content": "Is vegetarian", "reason": "the same diet in other words"}])]

    run = run_pass()

    assert run.merged == 1, list(run.reviews.values_list("rejections", flat=True))
    merged = Truth.objects.get(user=user, origin=Origin.CONSOLIDATED)
    assert merged.evidence == ["s1:2", "s1:3", "s2:1"]
    assert merged.kind == "preference"
    out = io.StringIO()
    call_command("export_truths", "--user", "ana", stdout=out)
    rows = {r["content"]: r for r in map(json.loads, out.getvalue().splitlines())}
    assert rows["Is vegetarian"]["evidence"] == ["s1:2", "s1:3", "s2:1"]


def test_significant_changes_of_a_merge_list_every_member(truth_factory, user_factory, run_factory):
    """The other side of the supersede's fix: a merge's "was:" lines are all its members."""
    user = user_factory()
    truth_factory("Has a dog named Rex", user=user, embedding=vector_at(1.0))
    truth_factory("has a dog named Rex.", user=user, embedding=vector_at(0.95))
    run = execution.run_sync(run=run_factory(), client=get_judge_client("rules"), embedder=get_embedder())
    changes = inventory.significant_changes(run)
    assert sorted(changes[0]["sources"]) == ["Has a dog named Rex", "has a dog named Rex."]
