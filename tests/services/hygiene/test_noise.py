"""Noise detector: every category in several wordings, in the tier it belongs to, and
traps that must stay (pure: no database; ``benchmarks/noise_tiers.py`` reads the tables)."""

from __future__ import annotations

import pytest

from iris_consolidation.services.hygiene.noise_rules import (
    DESCRIPTIONS,
    SUSPECT,
    TIER_SURE,
    TIER_SUSPECT,
    detect,
)
from iris_consolidation.services.hygiene.noise_rules import SURE as CATEGORIES

#: rho's own examples of the SOP's categories (reworded as in the issue's table): the
#: rule judge retires each of them, so each is in the sure tier.
RHO = {
    "version": "Updated the deploy CLI to v1.2.3",
    "heartbeat": "Heartbeat Feb 19: all clear",
    "task_status": "Task 'migrate billing tables' is complete",
    "benchmark": "Scored 42/89 = 47.2% on the eval run",
    "bug_sweep": "Reviewed the auth module, no bugs found",
    "run_result": "Run 5521 of the nightly job failed",
}

#: Two more wordings of every category, each with the tier that must find it.
WORDINGS = [
    ("version", TIER_SURE, "Bumped the SDK from 0.9 to 1.0.4"),
    ("version", TIER_SUSPECT, "Installed the latest update of the Slack app"),
    ("heartbeat", TIER_SURE, "Hourly check-in: no incidents, all clear"),
    ("heartbeat", TIER_SUSPECT, "Agent status report for the week: nothing unusual"),
    ("task_status", TIER_SURE, "Ticket OPS-88 closed"),
    ("task_status", TIER_SUSPECT, "Wrapped up the last action item from Monday's standup"),
    ("benchmark", TIER_SURE, "Benchmark run: p95 latency 120 ms"),
    ("benchmark", TIER_SUSPECT, "Accuracy went up to 71% after the prompt change"),
    ("bug_sweep", TIER_SURE, "Audited the payments service code: zero issues"),
    ("bug_sweep", TIER_SUSPECT, "Fixed a couple of bugs in the export"),
    ("run_result", TIER_SURE, "The nightly backup job failed again"),
    ("run_result", TIER_SUSPECT, "The scraper script errored out overnight"),
    ("ui_detail", TIER_SURE, "Changed the sidebar background to #1e1e2e"),
    ("ui_detail", TIER_SUSPECT, "The settings page layout uses a two-column grid"),
    ("transient", TIER_SURE, "PR #77 is waiting for review"),
    ("transient", TIER_SUSPECT, "Blocked on the code review from Sam this week"),
]

#: Look-alikes that share noise's words and are facts about the person, preferences or
#: standing instructions: the issue's six (a race time, a degree, a preference, a standing
#: instruction, a child's age, a goal in a football final), then a personal best, an exam
#: grade the person is proud of, and a standing "always run the tests before a release".
#: Neither tier flags them, so no judge, rules or model, ever sees them as noise.
LOOK_ALIKES = [
    "Ran the Boston marathon in 3:12:45",
    "Completed a master's degree in computer science in 2020",
    "Prefers version 2 of the dashboard with the 16px layout",
    "Wants every answer to end with a list of sources",
    "Her daughter Mia is 6 years old",
    "Scored the winning goal in the 2022 football final",
    "Set a personal best of 41:30 in the 10k",
    "Got 94% on the final chemistry exam and is proud of it",
    "Always run the tests before a release",
]

NOISE = {
    "version": [
        "Upgraded numpy to 2.1.3",
        "Updated the app to version 4.2",
        "Deployed v1.8.0 to production",
        "The update was successful",
        "Confirmed the upgrade to Postgres 16 went through",
        "Now running Django version 5.2.1",
    ],
    "heartbeat": [
        "Heartbeat OK at 09:00",
        "Daily check-in: all clear",
        "Status check passed, nothing to report",
        "All systems operational",
        "Routine check-in with the agent at noon",
    ],
    "benchmark": [
        "Scored 87.5% on MMLU",
        "41 of 42 tests passed",
        "Benchmark: 1200 qps with 35 ms median",
        "F1 of 0.82 on the dev set",
        "Run #42 finished in 3.2s",
        "All tests passed on the CI run",
    ],
    "run_result": [
        "Build 1042 failed on the linux runner",
        "The deploy pipeline 17 succeeded",
        "The nightly ETL job timed out",
    ],
    "bug_sweep": [
        "Fixed a typo in utils.py",
        "Fixed 3 lint errors",
        "Bug sweep: fixed several null checks",
        "Fixed two flaky tests",
        "Fixed a crash on line 42",
    ],
    "ui_detail": [
        "Set the header padding to 12px on the landing page",
        "Changed the button color to #3366ff",
        "Moved the submit button to the left of the form",
        "The navbar height is 64px now",
        "Centered the login modal on the page",
    ],
    "task_status": [
        "Ticket PROJ-12 marked done",
        "Task 3 is completed",
        "Completed the migration task",
        "Marked the card as done",
        "The pull request was merged",
    ],
    "transient": [
        "The CI build is currently failing",
        "PR #456 is awaiting review",
        "Branch feature-x is 3 commits behind main",
        "Currently debugging the login flow",
        "Working tree is dirty with uncommitted changes",
    ],
}

#: The issue's traps (a race time, a degree, a preference, a number that is a fact about
#: the person) and everyday facts from LoCoMo/MSC-like text that share words with noise.
KEEP = [
    "Ran the Berlin marathon in 3:41:07",
    "Finished the 10k race in 48 minutes",
    "Has a master's degree in physics from 2019",
    "Completed a PhD in 2021",
    "Prefers the dark theme with 14px font",
    "Likes the new version of the app better",
    "Has 3 kids",
    "Is 34 years old",
    "Scored 1450 on the SAT",
    "John scored 40 points in a game last week, his highest ever.",
    "Dave is currently working on restoring a car.",
    "Joanna has completed her second script.",
    "Fixed a bug in the login flow because tokens expired silently; always refresh tokens first",
    "Works as a software tester",
    "Uses Python 3.12 for all projects",
    "Owns a 2015 Honda Civic",
    "Lives at 12 Baker Street",
    "Has 2 cats",
    "James faced a bug in his project that messed up the game mechanics.",
    "I have completed college and I plan to start a business.",
]


@pytest.mark.parametrize("category,text", [(c, t) for c, texts in NOISE.items() for t in texts])
def test_each_category_is_detected_in_several_wordings(category, text):
    match = detect(text)
    assert match is not None, text
    assert (match.category, match.tier) == (category, TIER_SURE)


@pytest.mark.parametrize("category,text", list(RHO.items()))
def test_rhos_examples_are_in_the_sure_tier(category, text):
    match = detect(text)
    assert match is not None, text
    assert (match.category, match.tier) == (category, TIER_SURE)


@pytest.mark.parametrize("category,tier,text", WORDINGS)
def test_each_wording_is_found_by_the_tier_it_belongs_to(category, tier, text):
    match = detect(text)
    assert match is not None, text
    assert (match.category, match.tier) == (category, tier)
    assert match.matched and match.matched in " ".join(text.lower().split())


def test_every_category_is_covered_in_both_tiers():
    assert set(NOISE) == set(CATEGORIES) == set(SUSPECT) == set(DESCRIPTIONS)
    assert {(c, t) for c, t, _ in WORDINGS} == {(c, t) for c in DESCRIPTIONS for t in (TIER_SURE, TIER_SUSPECT)}


#: Everyday texts in the words of a sure pattern: at most suspects (a model may decide),
#: never retired by the rules alone.
NEVER_SURE = [
    "Reviewed the contract code of conduct, no issues found",
    "Reviewed her tax files, no errors found",
    "Upgraded her phone to iOS 17.2",
    "Her morning run passed through the old park",
    "Got 3/4 = 75% of the answers right at the pub trivia night",
]


@pytest.mark.parametrize("text", NEVER_SURE)
def test_everyday_texts_are_never_in_the_sure_tier(text):
    match = detect(text)
    assert match is None or match.tier == TIER_SUSPECT, match


@pytest.mark.parametrize("text", [*KEEP, *LOOK_ALIKES, "Scored 18/20 (90%) on the driving theory test"])
def test_traps_stay(text):
    assert detect(text) is None
