"""The noise stage's two nets on rho's examples, more wordings and look-alikes, through the
real command: the rule judge retires the sure tier only; a model (the scripted litellm
server) decides both tiers; no look-alike is ever retired or even asked about."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils.html import escape

from iris_consolidation.inventory_display import stage_lines
from iris_consolidation.models import ConsolidationRun, RetiredReason, StageResult, Truth, TruthChange
from iris_consolidation.services.hygiene import noise_rules
from iris_consolidation.text.patterns import required_literals
from tests import llm_stub
from tests.conftest import unit_vector
from tests.services.hygiene.test_noise import LOOK_ALIKES, RHO, WORDINGS

pytestmark = pytest.mark.django_db

SURE = [*RHO.values(), *(t for _, tier, t in WORDINGS if tier == "sure")]
SUSPECTS = [t for _, tier, t in WORDINGS if tier == "suspect"]


@pytest.fixture
def table(truth_factory, user_factory, settings):
    """One user with rho's six, the two wordings of every category and the look-alikes
    (all of kind fact, orthogonal vectors: no cluster, the only model calls are noise's)."""
    settings.IRIS_CONSOLIDATION_NOISE = "apply"
    settings.IRIS_CONSOLIDATION_LEXICAL = "off"
    user = user_factory("rho")
    texts = [*SURE, *SUSPECTS, *LOOK_ALIKES]
    return user, {t: truth_factory(t, user=user, embedding=unit_vector(*([0.0] * i + [1.0])))
                  for i, t in enumerate(texts)}


def _sync() -> tuple[ConsolidationRun, str]:
    out = StringIO()
    call_command("consolidate_truths", "--sync", "--full", "--verbosity", "2", stdout=out, stderr=StringIO())
    return ConsolidationRun.objects.order_by("-created_at").first(), out.getvalue()


def _live(user) -> set[str]:
    return set(Truth.objects.filter(user=user).values_list("content", flat=True))


def _run_page(client, run) -> str:
    return client.get(reverse("admin:iris_consolidation_consolidationrun_change", args=[run.pk])).content.decode()


def test_the_rule_judge_retires_the_sure_tier_and_lists_the_suspects(table, settings, admin_client):
    settings.IRIS_CONSOLIDATION_JUDGE = "rules"
    user, truths = table
    run, output = _sync()
    assert _live(user) == {*SUSPECTS, *LOOK_ALIKES}
    result = StageResult.objects.get(run=run, stage="noise")
    assert (result.affected, result.applied) == (len(SURE), len(SURE))
    by_text = {f["content"]: f for f in result.findings}
    assert set(by_text) == {*SURE, *SUSPECTS}  # a look-alike is not even a suspect
    assert {t: (f["tier"], f["retires"], f["retired"]) for t, f in by_text.items()} == {
        **{t: ("sure", True, True) for t in SURE}, **{t: ("suspect", False, False) for t in SUSPECTS}
    }
    change = TruthChange.objects.get(truth=truths[RHO["benchmark"]], action="retired")
    assert change.reason == "noise: benchmark (sure)"
    report = run.inventory["stages"]["noise"]
    assert report["by_tier"] == {"sure": len(SURE), "suspect": len(SUSPECTS)}
    assert report["suspects"] == len(SUSPECTS)
    assert {e["content"] for e in report["examples"]} <= set(SURE) and len(report["examples"]) == 5
    assert {e["content"] for e in report["suspect_examples"]} <= set(SUSPECTS)
    assert f"      {len(SUSPECTS)} suspect(s) left for a model (the rule judge retires the sure tier only)" in output
    assert f"#{truths[RHO['version']].pk} {RHO['version']!r} (version, sure)" in output
    page = _run_page(admin_client, run)
    assert f"<q>{RHO['version']}</q> <span class=\"iris-meta\">version, sure tier, retired</span>" in page
    assert f"Noise: {len(SUSPECTS)} suspects left for a model" in page
    first = report["suspect_examples"][0]
    shown = f"#{first['truth_id']} <q>{escape(first['content'])}</q> <span class=\"iris-meta\">{first['category']}"
    assert f"{shown}, suspect tier" in page


def test_a_model_decides_both_tiers_and_never_sees_a_look_alike(table, llm_server, admin_client):
    """A model that answers "noise" for everything it is shown retires both tiers and
    nothing else: the look-alikes never reach it."""
    user, truths = table
    llm_server.handler = llm_stub.noise_by_text({*SURE, *SUSPECTS, *LOOK_ALIKES})
    run, output = _sync()
    asked = [c for r in llm_server.chat_requests() if llm_stub.is_noise_call(r["json"])
             for c in llm_stub.candidates_of(r["json"])]
    assert sorted(c["content"] for c in asked) == sorted([*SURE, *SUSPECTS])
    tiers = {**dict.fromkeys(SURE, "sure"), **dict.fromkeys(SUSPECTS, "suspect")}
    assert {c["content"]: c["tier"] for c in asked} == tiers
    assert _live(user) == set(LOOK_ALIKES)
    suspect = WORDINGS[1][2]
    change = TruthChange.objects.get(truth=truths[suspect], action="retired")
    assert change.reason == "noise: version (suspect); model: scripted"
    assert Truth.all_objects.get(pk=truths[suspect].pk).retired_reason == RetiredReason.NOISE
    history = admin_client.get(reverse("admin:iris_consolidation_truth_history", args=[truths[suspect].pk]))
    assert history.status_code == 200 and "noise: version (suspect); model: scripted" in history.content.decode()
    report = run.inventory["stages"]["noise"]
    assert report["suspects"] == 0 and report["by_tier"] == {"sure": len(SURE), "suspect": len(SUSPECTS)}


def test_a_model_that_keeps_leaves_even_the_sure_tier(table, llm_server, admin_client):
    """The model decides: what it keeps stays, whatever the tier; what it retires says why."""
    user, truths = table
    llm_server.handler = llm_stub.noise_by_text({RHO["run_result"], SUSPECTS[0]})
    run, output = _sync()
    assert _live(user) == ({*SURE, *SUSPECTS, *LOOK_ALIKES} - {RHO["run_result"], SUSPECTS[0]})
    result = StageResult.objects.get(run=run, stage="noise")
    assert [(f["content"], f["tier"], f["model"]) for f in result.findings[:2]] == [
        (RHO["run_result"], "sure", "noise"), (SUSPECTS[0], "suspect", "noise")
    ]
    assert {f["model"] for f in result.findings[2:]} == {"keep"}
    assert f"{RHO['run_result']!r} (run_result, sure; model: scripted)" in output
    assert "\n".join(stage_lines(run.inventory["stages"], verbosity=2)) in output
    page = _run_page(admin_client, run)
    shown = f"<q>{SUSPECTS[0]}</q> <span class=\"iris-meta\">version, suspect tier; model: scripted, retired</span>"
    assert shown in page


def test_a_report_of_findings_written_before_the_tiers_still_reads(run_factory, user_factory):
    """Rows of earlier runs carry no ``tier`` or ``retires``: the rule judge's matches and the
    model's "noise" verdicts were what the stage retired, all of them the sure tier."""
    from iris_consolidation.services.hygiene import reports

    run = run_factory()
    user = user_factory("before")
    StageResult.objects.create(run=run, user=user, stage="noise", mode="apply", examined=3, affected=2, applied=2,
                               seconds=0.1, findings=[
                                   {"truth_id": 1, "content": "a", "category": "version", "retired": True},
                                   {"truth_id": 2, "content": "b", "category": "heartbeat", "model": "noise",
                                    "model_reason": "r", "retired": True},
                                   {"truth_id": 3, "content": "c", "category": "transient", "model": "keep",
                                    "model_reason": "k", "retired": False},
                               ])
    report = reports.summarise(run)["noise"]
    assert [e["content"] for e in report["examples"]] == ["a", "b"]
    assert (report["by_tier"], report["suspects"], report["model_kept"]) == ({"sure": 3, "suspect": 0}, 0, 1)


def test_detect_all_is_detect_of_each_text():
    """The joined scan finds what ``detect`` finds text by text, also where texts side by
    side could make a match across them or a text ends where a lookahead looks on."""
    texts = [
        "Upgraded numpy to 2.1.3", "Reviewed the parser code", "of the auth module, no bugs found",
        "Heartbeat OK at 09:00", "Likes the heartbeat of the city", "The CI build is currently failing",
        "set the header", "padding to 12px on the page", "Fixed a typo in utils.py", "Went to Lisbon",
        "task", "is done", "Finished the sprint", "Checked the code", "of conduct; no issues found", "",
        "   Mixed   CASE  and   spaces  v1.2.3 ", "Scored 88% on the MMLU benchmark", "42/89 = 47.2% on the eval",
    ]
    for order in (texts, texts[::-1], texts[1::2] + texts[::2]):
        assert noise_rules.detect_all(order) == [noise_rules.detect(t) for t in order]
    assert noise_rules.detect_all([]) == []


def test_needed_in_finds_every_needed_string_a_text_holds():
    """The one Aho-Corasick scan finds the strings a plain substring test of each finds:
    overlapping ones ("bug" in "bugs"), one at the very start or end, beside characters
    outside the Basic Multilingual Plane, in texts of the needed strings themselves."""
    import random

    rng = random.Random(11)
    pieces = [*noise_rules._NEEDED, " ", "😀", "日本", "é", "\x00\n", "x", "9", "."]
    texts = ["", "bugs", "no bugs found", "v1.2.3 😀 px", "patch" * 3, *noise_rules._NEEDED]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) for _ in range(500)]
    found = 0
    for text in texts:
        expected = {literal for literal in noise_rules._NEEDED if literal in text}
        assert noise_rules.needed_in(text) == expected, text
        found += len(expected)
    assert found > 1000  # the texts do hold needed strings, many at a time


@pytest.mark.parametrize(("pattern", "needs"), [
    (r"ab(?:cd|ef)+g?", ("ab",)),
    (r"(?:x|yy)z", ("x", "yy")),
    (r"a|bc", ("a", "bc")),
    (r"\d+\s?(?:px|rem)\b", ("px", "rem")),
    (r"\d+(?:\.\d+)?%?", ()),  # nothing literal every match must hold
    (r"(?:ab)?c+d", ("c",)),  # c+ holds one c at least; of equal lengths the first
    (r"(?i)abc", ()),  # case-insensitive: a literal test would be wrong
    (r"(?:x|\d)y", ("y",)),  # one alternative has no literal: the branch says nothing
])
def test_required_literals_are_held_by_every_match(pattern, needs):
    assert required_literals(pattern) == needs


def test_every_pattern_match_holds_one_of_its_required_literals():
    """Over the tiers' own example texts: a pattern that matches holds one of its strings,
    so skipping a pattern whose strings occur nowhere never loses a match."""
    texts = [*SURE, *SUSPECTS, *LOOK_ALIKES, "42/89 = 47.2% on the eval", "all 120 unit tests passed",
             "v1.2.3 is installed", "stand-up update: nothing to report", "Set the header padding to 12px"]
    checked = 0
    for pattern in noise_rules._TIER_PATTERNS:
        for text in texts:
            match = pattern.exact.search(" ".join(text.lower().split()))
            if match:
                checked += 1
                assert any(literal in match.group(0) for literal in pattern.needs), (pattern.exact.pattern, text)
    assert checked >= len(SURE) + len(SUSPECTS)
