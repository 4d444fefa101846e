"""Noise: truths that should never have been stored (rho's auto-remove categories).

A deterministic detector, conservative by design (when uncertain, keep). A truth is
noise when one pattern of a category matches its text AND no guard does. Categories
(rho's memory-consolidate SOP):

- ``version``: version numbers or update confirmations ("Upgraded numpy to 2.1.3").
- ``heartbeat``: heartbeat or check-in reports ("Heartbeat OK", "Daily check-in: all clear").
- ``benchmark``: benchmark scores or run results ("Scored 87.5% on MMLU", "41/42 tests passed").
- ``bug_sweep``: bug sweeps with no general root cause ("Fixed a typo in utils.py").
- ``ui_detail``: UI implementation details ("Set the header padding to 12px").
- ``task_status``: task completion status ("Ticket PROJ-12 marked done").
- ``transient``: transient project state ("The CI build is currently failing").

The patterns need the vocabulary of software work (a version string, "tests passed",
"ticket", "px", "the build"), so everyday facts about a person ("Scored 40 points in
a game", "Is currently working on restoring a car", "Completed a master's degree")
never match. Guards keep anything that reads as a preference, a lesson or root
cause ("because", "always", "whenever"), or a fact about the person (age, degree,
race time, family). Never a preference (``kind`` preference) and never a protected
truth: the stage selects consolidatable truths of other kinds only.

**With an LLM judge** (``confirm``), the detector's candidates, and only those, go to
the model in batches of ``PER_CALL`` (one call each, ``LiteLLMJudge.classify_noise``;
the truths travel as quoted JSON data, never as instructions) for rho's "30-day test":
would this still matter in 30 days? A candidate is noise only when the model says
"noise" with a reason; a "keep", a candidate left out or garbled, a malformed or cut-off
reply, or a call that fails keeps it (keep on doubt). The call is made in ``report``
mode too, so that the report lists what ``apply`` would retire.

Writes nothing: ``stages.run_noise`` retires (apply mode) through ``retire.retire``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ...exceptions import JudgeResponseInvalid, JudgeUnavailable
from ...llm.base import NoiseCandidate, NoiseReply, Spend
from ...models import Truth

logger = logging.getLogger(__name__)

#: Candidates per classification call: a few hundred tokens each way per call, and a
#: failed call keeps only its own batch.
PER_CALL = 20

#: Categories in the order they are tried, each with its patterns (lower-case text).
_VERSION = r"(?:version\s+|v)?\d+(?:\.\d+){1,3}(?:[-+][\w.]+)?"
CATEGORIES: dict[str, tuple[str, ...]] = {
    "version": (
        rf"\b(?:updated|upgraded|bumped|downgraded|migrated|pinned|rolled back)\b.{{0,50}}\b(?:to|from)\s+{_VERSION}\b",
        rf"\b(?:installed|deployed|released|shipped|published|rolled out)\s+(?:\S+\s+){{0,3}}{_VERSION}\b",
        rf"\b(?:now|currently)\s+(?:on|running|using)\s+(?:\S+\s+){{0,2}}(?:version\s+|v)\d+(?:\.\d+)+\b",
        r"^(?:the\s+)?(?:update|upgrade|installation|install|deployment|deploy|migration|patch)\s+"
        r"(?:was\s+|is\s+|has been\s+)?(?:successful|succeeded|completed|complete|done|applied|confirmed|finished)\b",
        r"\bconfirmed\s+(?:that\s+)?the\s+(?:update|upgrade|deploy(?:ment)?|install(?:ation)?|patch)\b",
    ),
    "heartbeat": (
        r"\bheartbeat\b",
        r"\b(?:check-in|checkin|status check|health ?check|ping|uptime check)\b.{0,40}"
        r"\b(?:ok|okay|passed|green|nominal|normal|no issues|nothing to report|all clear|received|completed|done)\b",
        r"\ball systems (?:are\s+)?(?:operational|normal|nominal|green|ok|go)\b",
        r"^(?:routine|daily|hourly|weekly|scheduled|periodic)\s+(?:check-in|checkin|status report|status update|sync|check)\b",
        r"\bnothing (?:new\s+)?to report\b",
    ),
    "benchmark": (
        r"\b(?:benchmark(?:s|ed)?|eval(?:uation)? run|test suite|ci run|test run|pipeline run|load test)\b.{0,60}"
        r"\b\d+(?:\.\d+)?\s?(?:%|ms|s|sec|seconds|qps|rps|tokens/s|/\d+)",
        r"\b(?:scored|achieved|got|reached|hit)\s+\d+(?:\.\d+)?\s?%?\s+(?:on|in)\s+(?:the\s+)?"
        r"(?:mmlu|humaneval|gsm8k|mt-bench|swe-bench|hellaswag|benchmark|eval|evaluation|test set|validation set|leaderboard)\b",
        r"\b(?:f1|bleu|rouge(?:-\w+)?|auc|p95|p99|qps|mrr|ndcg(?:@\d+)?)\b\s*(?:score\s*)?(?:of|was|is|=|:|at)?\s*\d+(?:\.\d+)?",
        r"\b(?:\d+|all)\s+(?:of\s+\d+\s+)?(?:unit\s+|integration\s+|e2e\s+)?tests?\s+"
        r"(?:passed|failed|pass|fail|are passing|are failing|green|red)\b",
        r"\b(?:run|build|job)\s+#\d+\b.{0,40}\b(?:passed|failed|finished|succeeded|took)\b",
    ),
    "bug_sweep": (
        r"^(?:fixed|patched|resolved|squashed|cleaned up)\s+(?:a\s+|the\s+|\d+\s+|several\s+|some\s+|minor\s+|small\s+|two\s+|three\s+)*"
        r"(?:typos?|lint(?:ing)?\s+(?:errors?|warnings?|issues?)|warnings?|off-by-one|null pointer|flaky tests?|"
        r"failing tests?|import errors?|type errors?|compiler errors?)\b",
        r"\bbug ?sweep\b",
        r"\b(?:lint|linter|flake8|eslint|mypy|ruff|pylint|clippy)\s+(?:errors?|warnings?|issues?)\s+"
        r"(?:fixed|cleaned(?: up)?|resolved|silenced)\b",
        r"\bfixed\s+(?:a\s+|the\s+|\d+\s+)?(?:typo|bug|crash|error|issue)s?\s+(?:in|on|at)\s+"
        r"(?:line\s+\d+|[\w/.-]+\.(?:py|js|ts|tsx|jsx|go|rs|java|rb|css|scss|html|md|yml|yaml|json|toml))\b",
    ),
    "ui_detail": (
        r"\b(?:button|navbar|header|footer|sidebar|modal|dropdown|tooltip|banner|card|input field|form field|"
        r"icon|logo|menu|tab|column|layout)\b.{0,60}\b\d+\s?(?:px|rem|em|pt)\b",
        r"\b(?:padding|margin|font[- ]size|border[- ]radius|line[- ]height|z-index|gap|width|height)\b\s*"
        r"(?:of|to|=|:|is|was|set to|changed to)?\s*\d+\s?(?:px|rem|em|pt|%)?\b.{0,40}\b(?:on|of|for|in)\s+the\b",
        r"\b(?:color|colour|background|fill|border)\b.{0,30}#[0-9a-f]{3,8}\b",
        r"\b(?:moved|aligned|centered|centred|renamed|restyled|re-styled)\s+the\s+(?:\w+\s+){0,2}"
        r"(?:button|navbar|header|footer|sidebar|modal|dropdown|tooltip|icon|logo|menu|tab|component|div|css class)\b",
        r"\b(?:css|flexbox|grid-template|classname|tailwind class)\b.{0,40}\b(?:changed|set|added|removed|updated)\b",
    ),
    "task_status": (
        r"^(?:the\s+)?(?:task|ticket|issue|todo|to-do|subtask|story|pr|pull request|step|milestone|card)\b"
        r"[^.]{0,60}\b(?:is|was|has been|marked(?: as)?)\s+(?:now\s+)?"
        r"(?:done|completed|complete|finished|closed|merged|resolved|in progress|started|blocked|pending)\b",
        r"\b(?:marked|moved|set)\s+(?:the\s+)?(?:ticket|task|issue|card|story|subtask|todo)\b.{0,40}"
        r"\b(?:done|complete|completed|closed|in progress|resolved)\b",
        r"^(?:completed|finished|done with|wrapped up|closed out|closed)\s+(?:the\s+|task\s+|ticket\s+|step\s+)?"
        r"(?:task|ticket|step|subtask|issue|todo|refactor|sprint|pr|pull request|migration task|story)\b",
        r"\b(?:jira|ticket|issue|task|pr)\s*#?\s*(?:[a-z]+-)?\d+\b.{0,40}\b(?:done|completed|closed|resolved|merged)\b",
    ),
    "transient": (
        r"\b(?:currently|right now|at the moment|for now|today)\b.{0,50}\b(?:debugging|refactoring|deploying|"
        r"compiling|bisecting|on branch|blocked on|waiting (?:for|on) (?:the\s+)?(?:ci|build|review|deploy|pipeline))\b",
        r"\bthe\s+(?:ci\s+)?(?:build|ci|pipeline|deploy(?:ment)?|staging server|test suite|dev server)\s+"
        r"(?:is|was)\s+(?:currently\s+|still\s+)?(?:failing|broken|red|down|green|passing|running|stuck|flaky)\b",
        r"\b(?:pr|pull request|merge request|mr)\s*#?\d+\b.{0,40}\b(?:awaiting|waiting for|needs|pending|in)\s+review\b",
        r"\bbranch\s+[\w/.-]+\s+is\b.{0,40}\b(?:ahead|behind|out of date|stale|diverged)\b",
        r"\b(?:working (?:tree|directory)|worktree|staging area)\b.{0,30}\b(?:clean|dirty|uncommitted)\b",
        r"\b(?:currently|now)\s+on\s+branch\s+[\w/.-]+",
    ),
}

#: Texts that stay whatever else matches: preferences, lessons and root causes, facts
#: about the person (the issue's traps: a race time, a degree, a preference, a number
#: that is a fact about the person).
GUARDS: tuple[str, ...] = (
    r"\b(?:prefers?|preferred|likes?|loves?|enjoys?|hates?|dislikes?|favou?rites?|wants?|would rather|fond of)\b",
    r"\b(?:because|root cause|caused by|due to|lesson|learned|learnt|always|never|whenever|should|must|to avoid|"
    r"so that|rule of thumb|make sure|remember to)\b",
    r"\b(?:years? old|aged?\s+\d+|birthday|born|married|wife|husband|son|daughter|kids|children|"
    r"marathon|half[- ]marathon|triathlon|race|personal best|\bpb\b|degree|bachelor'?s?|master'?s|phd|doctorate|"
    r"diploma|graduated|gpa|\bsat\b|\bgre\b|salary|weighs?|kg|lbs|miles|km)\b",
)

_COMPILED = {name: tuple(re.compile(p) for p in patterns) for name, patterns in CATEGORIES.items()}
_GUARDS = tuple(re.compile(p) for p in GUARDS)


@dataclass(frozen=True, kw_only=True)
class NoiseMatch:
    """Why a text is noise: its category and the words that matched."""

    category: str
    matched: str


def detect(content: str) -> NoiseMatch | None:
    """The noise category of ``content``, or None to keep it (see the module docstring).

    Pure and deterministic; lower-cases the text, collapses spaces.
    """
    text = " ".join(content.lower().split())
    if any(g.search(text) for g in _GUARDS):
        return None
    for category, patterns in _COMPILED.items():
        for pattern in patterns:
            match = pattern.search(text)
            if match:
                return NoiseMatch(category=category, matched=match.group(0))
    return None


def find_noise(truths: list[Truth]) -> list[tuple[Truth, NoiseMatch]]:
    """The noise among ``truths`` (callers pass consolidatable truths); preferences are
    never noise."""
    found = []
    for truth in truths:
        if truth.kind == "preference":
            continue
        match = detect(truth.content)
        if match is not None:
            found.append((truth, match))
    return found


#: What the model said about a candidate (``Confirmation.decisions``).
MODEL_NOISE = "noise"
MODEL_KEEP = "keep"
MODEL_ERROR = "error"


@dataclass(kw_only=True)
class Confirmation:
    """The model's classification of the detector's candidates.

    ``decisions`` maps a truth id to ``(MODEL_NOISE | MODEL_KEEP | MODEL_ERROR, reason)``
    (the reason is the model's, or the error of the call that left it undecided);
    ``spend`` sums every call; ``model`` and ``prompt_version`` name what was asked."""

    decisions: dict[int, tuple[str, str]] = field(default_factory=dict)
    spend: Spend = field(default_factory=Spend)
    model: str = ""
    prompt_version: str = ""
    errors: int = 0

    def confirmed(self, found: Sequence[tuple[Truth, NoiseMatch]]) -> list[tuple[Truth, NoiseMatch]]:
        """The members of ``found`` the model confirmed as noise, in order."""
        return [(t, m) for t, m in found if self.decisions.get(t.pk, (MODEL_ERROR, ""))[0] == MODEL_NOISE]


def confirm(
    found: Sequence[tuple[Truth, NoiseMatch]],
    classify: Callable[[Sequence[NoiseCandidate]], NoiseReply],
    *,
    per_call: int = PER_CALL,
) -> Confirmation:
    """Ask ``classify`` (``LiteLLMJudge.classify_noise``) about the detector's candidates,
    ``per_call`` at a time (aliases n1, n2, ... per call). Never raises for a model's
    failure: a call that fails (``JudgeUnavailable``, ``JudgeResponseInvalid``) keeps its
    candidates, recorded as ``MODEL_ERROR`` with the error."""
    result = Confirmation()
    for start in range(0, len(found), per_call):
        batch = list(found[start : start + per_call])
        by_alias = {f"n{i + 1}": truth for i, (truth, _) in enumerate(batch)}
        candidates = [
            NoiseCandidate(alias=alias, content=truth.content, kind=truth.kind, category=match.category)
            for alias, (truth, match) in zip(by_alias, batch, strict=True)
        ]
        try:
            reply = classify(candidates)
        except (JudgeUnavailable, JudgeResponseInvalid) as exc:
            logger.warning("noise classification failed; %d candidate(s) kept: %s", len(batch), exc)
            if exc.spend is not None:
                result.spend = result.spend + exc.spend
            result.errors += 1
            for truth in by_alias.values():
                result.decisions[truth.pk] = (MODEL_ERROR, f"{type(exc).__name__}: {exc}"[:300])
            continue
        result.spend = result.spend + reply.spend
        result.model, result.prompt_version = reply.model, reply.prompt_version
        for alias, truth in by_alias.items():
            if alias in reply.noise:
                result.decisions[truth.pk] = (MODEL_NOISE, reply.noise[alias])
            else:
                result.decisions[truth.pk] = (MODEL_KEEP, reply.reasons.get(alias, "not confirmed: kept on doubt"))
    return result
