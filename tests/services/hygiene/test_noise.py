"""Noise detector: every category in several wordings, and traps that must stay (pure)."""

from __future__ import annotations

import pytest

from iris_consolidation.services.hygiene.noise import CATEGORIES, detect

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
    assert match.category == category


def test_every_category_is_covered():
    assert set(NOISE) == set(CATEGORIES)


@pytest.mark.parametrize("text", KEEP)
def test_traps_stay(text):
    assert detect(text) is None
