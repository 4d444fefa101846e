"""False refusals the oracle run found on the PersonaChat pairs, kind by kind.

Each kind merges in several wordings (the members joined, as the oracle judge merges,
so only the pair checks can refuse), and its opposite-meaning twins are still refused
with the code that refused them before. Pure: no database, no model.

- one job frame: "I work as a nurse" / "My job is nursing" (was a contrast: work / job);
- positive idioms with a negation word: "Cannot wait to move out" / "Is excited to leave
  home", "Nothing beats a hot cup of java" / "Is a huge coffee lover" (was polarity);
- moves by another name: "Recently moved to this country" / "Immigrated within the past
  few years" (was state_changed: "moved" reported a change, "immigrated" did not).

Two wordings that share only a name and no word ("I can't wait for Christmas." / "I'm
excited about Christmas.") are still refused by the details_only rule unless the
judge states the synonym; the wordings below share a word besides the frame.
"""

from __future__ import annotations

import pytest

from iris_consolidation import text
from iris_consolidation.evaluation.oracle import joined_content
from iris_consolidation.services.pipeline import validation as v
from tests.helpers import judge_request, merge_action, merge_all_codes


def _codes(a: str, b: str, *, content: str | None = None, reason: str = "One statement.") -> list[str]:
    """Codes of the refusals of a merge of ``a`` and ``b`` (oldest first) into
    ``content`` (default: both texts joined, every word kept)."""
    return merge_all_codes((a, b), joined_content([a, b]) if content is None else content, reason)


def _first_signal(a: str, b: str) -> str:
    """The first signal of a merge of ``a`` and ``b``: the members' own reading, what a fused
    text of both raises for the second look (a joined one is refused outright)."""
    request = judge_request(a, b)
    return v.findings_of(merge_action(("t1", "t2"), joined_content([a, b])), request)[0][0]


# --- one job frame (contrast) -------------------------------------------------------------

SAME_JOB = [
    ("I work as a nurse.", "My job is nursing."),
    ("I work as a carpenter.", "Carpentry is my profession."),
    ("Works as a teacher at Oakwood.", "His job is teaching at Oakwood."),
    ("I am employed as an accountant.", "My occupation is accounting."),
]


@pytest.mark.parametrize(("a", "b"), SAME_JOB)
def test_one_job_in_two_job_frames_merges(a, b):
    assert _codes(a, b) == []


@pytest.mark.parametrize(
    ("a", "b", "code"),
    [
        ("I work as a nurse.", "My job is teaching.", v.Code.CONTRAST),
        ("I work as a nurse.", "I work as a teacher.", v.Code.CONTRAST),
        ("My job is boring.", "My job is stressful.", v.Code.CONTRAST),
        ("My job is nursing.", "My job is not nursing.", v.Code.POLARITY),
    ],
)
def test_two_jobs_in_one_frame_stay_apart(a, b, code):
    assert _first_signal(a, b) == code
    assert _codes(a, b) == [v.Code.SIDE_BY_SIDE]  # joined, not fused: an invariant


def test_the_job_frame_is_one_word_for_the_contrast_check_only():
    # A careless merge into one member's text still drops the other's word.
    assert text.contrast("I work as a nurse.", "My job is nursing.") is None
    assert _codes("I work as a nurse.", "My job is nursing.", content="I work as a nurse.") == [v.Code.LOST_WORDS]
    assert _codes("I work as a nurse.", "My job is nursing.", content="I work as a nurse.", reason="job = work") == []


# --- positive idioms with a negation word (polarity) --------------------------------------

SAME_EAGERNESS_OR_LIKING = [
    ("I cannot wait to move out.", "I am excited to leave home."),
    ("I can't wait for the holidays.", "I'm excited about the holidays."),
    ("Nothing beats a hot cup of java.", "I am a huge coffee lover."),
    ("Nothing beats lying in the sun.", "Loves lying in the sun."),
    ("Nothing is better than fresh bread.", "Loves fresh bread."),
]


@pytest.mark.parametrize(("a", "b"), SAME_EAGERNESS_OR_LIKING)
def test_a_positive_idiom_merges_with_its_plain_statement(a, b):
    assert _codes(a, b) == []
    assert text.polarity_key(a) == text.polarity_key(b) == (False, False)


@pytest.mark.parametrize(
    ("a", "b", "code"),
    [
        ("I can't wait to retire.", "I can wait to retire.", v.Code.CONTRAST),
        ("I cannot wait to move out.", "I do not want to move out.", v.Code.POLARITY),
        ("Nothing beats coffee.", "Does not like coffee.", v.Code.POLARITY),
        ("Nothing beats coffee.", "Hates coffee.", v.Code.POLARITY),
        ("Can't stand waiting.", "Can't wait to go.", v.Code.POLARITY),
        # Not the idiom: "cannot wait in" is still a negation.
        ("Cannot wait in long lines.", "Can wait in long lines.", v.Code.POLARITY),
    ],
)
def test_the_opposite_of_a_positive_idiom_stays_apart(a, b, code):
    assert _first_signal(a, b) == code
    assert _codes(a, b) == [v.Code.SIDE_BY_SIDE]  # joined, not fused: an invariant


# --- moves by another name (state_changed) -------------------------------------------------

SAME_MOVE = [
    ("I recently moved to this country.", "I immigrated within the past few years."),
    ("Relocated to Berlin for work.", "Moved to Berlin for work."),
    ("Emigrated from my home country in 2019.", "Moved away from my home country in 2019."),
]


@pytest.mark.parametrize(("a", "b"), SAME_MOVE)
def test_two_wordings_of_one_move_merge(a, b):
    assert _codes(a, b) == []
    assert text.reports_change(a) and text.reports_change(b)


@pytest.mark.parametrize(
    ("a", "b", "code"),
    [
        ("Immigrated to Canada.", "Lives in Canada.", v.Code.STATE_CHANGED),
        ("Relocated to Berlin.", "Works in Berlin.", v.Code.STATE_CHANGED),
        ("Moved to Berlin.", "Relocated to Munich.", v.Code.NAMES_DIFFER),
        ("Emigrated in 2019.", "Moved away in 2020.", v.Code.NUMBERS_DIFFER),
    ],
)
def test_a_move_never_merges_with_a_state_or_another_move(a, b, code):
    assert _first_signal(a, b) == code
    assert _codes(a, b) == [v.Code.SIDE_BY_SIDE]  # joined, not fused: an invariant
