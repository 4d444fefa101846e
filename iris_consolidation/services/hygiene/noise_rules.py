"""The noise detector's text rules (English): two tiers of patterns per category, and guards.

Pure data and one pure function, no Django: the text rules of a language, kept apart
from the stage so that they can move to a per-language package. Every pattern is
searched in the lower-cased text with its spaces collapsed.

- ``SURE``: the high-precision tier. Each pattern needs the vocabulary of software
  work (a version string, "the nightly job", "no bugs found" about a module, "px"), so
  that the rule judge may retire what it matches offline.
- ``SUSPECT``: the wide tier, every category again in looser words ("fixed a couple of
  bugs", "accuracy 71%", "currently investigating"). A suspect is never retired by
  the rules; only a model's 30-day test may retire it.
- ``GUARDS``: a text that matches a guard is neither, whatever else it says: a
  preference, a lesson, root cause or standing instruction ("because", "always"), or a
  fact about the person (age, family, studies and exams, races and personal bests,
  sport).

Categories (rho's memory-consolidate SOP), in the order they are tried: ``version``,
``heartbeat``, ``benchmark``, ``run_result``, ``bug_sweep``, ``ui_detail``,
``task_status``, ``transient``.
"""

from __future__ import annotations

import functools
import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import ahocorasick

from ...text.patterns import required_literals

#: The tiers: a ``sure`` match retires under the rule judge; a ``suspect`` goes to a model only.
TIER_SURE = "sure"
TIER_SUSPECT = "suspect"
TIERS = (TIER_SURE, TIER_SUSPECT)

#: One line per category, as the model's prompt and the admin name it.
DESCRIPTIONS: dict[str, str] = {
    "version": "version numbers or update confirmations",
    "heartbeat": "heartbeat or check-in reports",
    "benchmark": "benchmark scores or run results",
    "run_result": "runs or jobs that passed or failed",
    "bug_sweep": "bug sweeps with no general root cause",
    "ui_detail": "UI implementation and layout details",
    "task_status": "task completion status",
    "transient": "transient project state",
}

# --- English patterns ---------------------------------------------------------------

_VERSION = r"(?:version\s+|v)?\d+(?:\.\d+){1,3}(?:[-+][\w.]+)?"
_SOFTWARE_THING = (
    r"(?:modules?|code(?!\s+of\b)|codebase|repo(?:sitory)?|endpoints?|api|diff|commits?|branch|handlers?|"
    r"components?|library|package|pipeline|schema|migrations?|pull request|pr|"
    r"[\w/-]+\.(?:py|js|ts|go|rs|java|rb|sql))"
)
_NOTHING_FOUND = (
    r"(?:no|zero|0)\s+(?:new\s+|open\s+|more\s+)?(?:bugs?|issues?|"
    r"problems?|errors?|regressions?|defects?|vulnerabilit(?:y|ies))"
)
_RUN_THING = r"(?:run|job|build|pipeline|workflow|cron(?:\s?job)?|batch|task runner|script|deploy(?:ment)?)"
_RUN_OUTCOME = r"(?:passed|failed|succeeded|errored(?: out)?|crashed|timed out|aborted|went (?:green|red))"

SURE: dict[str, tuple[str, ...]] = {
    "version": (
        rf"\b(?:updated|upgraded|bumped|downgraded|migrated|pinned|rolled back)\b.{{0,50}}\b(?:to|from)\s+{_VERSION}\b",
        rf"\b(?:installed|deployed|released|shipped|published|rolled out)\s+(?:\S+\s+){{0,3}}{_VERSION}\b",
        r"\b(?:now|currently)\s+(?:on|running|using)\s+(?:\S+\s+){0,2}(?:version\s+|v)\d+(?:\.\d+)+\b",
        r"^(?:the\s+)?(?:update|upgrade|installation|install|deployment|deploy|migration|patch)\s+"
        r"(?:was\s+|is\s+|has been\s+)?(?:successful|succeeded|completed|complete|done|applied|confirmed|finished)\b",
        r"\bconfirmed\s+(?:that\s+)?the\s+(?:update|upgrade|deploy(?:ment)?|install(?:ation)?|patch)\b",
    ),
    "heartbeat": (
        r"\bheartbeat\b",
        r"\b(?:check-in|checkin|status check|health ?check|ping|uptime check)\b.{0,40}"
        r"\b(?:ok|okay|passed|green|nominal|normal|no issues|no incidents|"
        r"nothing to report|all clear|received|completed|done)\b",
        r"\ball systems (?:are\s+)?(?:operational|normal|nominal|green|ok|go)\b",
        r"^(?:routine|daily|hourly|weekly|scheduled|periodic)\s+(?:check-in|"
        r"checkin|status report|status update|sync|check)\b",
        r"\bnothing (?:new\s+)?to report\b",
    ),
    "benchmark": (
        r"\b(?:benchmark(?:s|ed)?|eval(?:uation)? run|test suite|ci run|test run|pipeline run|load test)\b.{0,60}"
        r"\b\d+(?:\.\d+)?\s?(?:%|ms|s|sec|seconds|qps|rps|tokens/s|/\d+)",
        r"\b(?:scored|achieved|got|reached|hit)\s+\d+(?:\.\d+)?\s?%?\s+(?:on|in)\s+(?:the\s+)?"
        r"(?:mmlu|humaneval|gsm8k|mt-bench|swe-bench|hellaswag|benchmark|"
        r"eval|evaluation|test set|validation set|leaderboard)\b",
        r"\b(?:f1|bleu|rouge(?:-\w+)?|auc|p95|p99|qps|mrr|"
        r"ndcg(?:@\d+)?)\b\s*(?:score\s*)?(?:of|was|is|=|:|at)?\s*\d+(?:\.\d+)?",
        r"\b(?:\d+|all)\s+(?:of\s+\d+\s+)?(?:unit\s+|integration\s+|e2e\s+)?tests?\s+"
        r"(?:passed|failed|pass|fail|are passing|are failing|green|red)\b",
        r"\b(?:run|build|job)\s+#\d+\b.{0,40}\b(?:passed|failed|finished|succeeded|took)\b",
        # A score as a fraction with its percentage ("42/89 = 47.2%") on a run of software work.
        r"\b\d+\s*/\s*\d+\s*(?:=|\(|,|is|or)\s*\d+(?:\.\d+)?\s?%.{0,40}\b(?:eval(?:uation)?|benchmark|run|suite|"
        r"test set|dev set|validation set|harness|model|prompts?)\b",
    ),
    "run_result": (
        rf"\b{_RUN_THING}\s+#?\d+\b.{{0,40}}\b{_RUN_OUTCOME}\b",
        rf"\b(?:nightly|scheduled|cron|ci|cd|deploy(?:ment)?|backup|"
        rf"etl|batch|build|release|integration|import|export|sync)\s+"
        rf"{_RUN_THING}\b.{{0,30}}\b{_RUN_OUTCOME}\b",
    ),
    "bug_sweep": (
        r"^(?:fixed|patched|resolved|squashed|cleaned up)\s+(?:a\s+|the\s+|"
        r"\d+\s+|several\s+|some\s+|minor\s+|small\s+|two\s+|three\s+)*"
        r"(?:typos?|lint(?:ing)?\s+(?:errors?|warnings?|issues?)|warnings?|off-by-one|null pointer|flaky tests?|"
        r"failing tests?|import errors?|type errors?|compiler errors?)\b",
        r"\bbug ?sweep\b",
        r"\b(?:lint|linter|flake8|eslint|mypy|ruff|pylint|clippy)\s+(?:errors?|warnings?|issues?)\s+"
        r"(?:fixed|cleaned(?: up)?|resolved|silenced)\b",
        r"\bfixed\s+(?:a\s+|the\s+|\d+\s+)?(?:typo|bug|crash|error|issue)s?\s+(?:in|on|at)\s+"
        r"(?:line\s+\d+|[\w/.-]+\.(?:py|js|ts|tsx|jsx|go|rs|java|rb|css|scss|html|md|yml|yaml|json|toml))\b",
        # A review of some code that found nothing ("Reviewed the auth module, no bugs found").
        rf"\b(?:reviewed|audited|checked|scanned|swept|inspected|went through)\s+(?:the\s+)?(?:[\w/.-]+\s+){{0,3}}"
        rf"{_SOFTWARE_THING}\b.{{0,40}}\b{_NOTHING_FOUND}\b",
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
        r"compiling|bisecting|on branch|blocked on|waiting (?:for|"
        r"on) (?:the\s+)?(?:ci|build|review|deploy|pipeline))\b",
        r"\bthe\s+(?:ci\s+)?(?:build|ci|pipeline|deploy(?:ment)?|staging server|test suite|dev server)\s+"
        r"(?:is|was)\s+(?:currently\s+|still\s+)?(?:failing|broken|red|down|green|passing|running|stuck|flaky)\b",
        r"\b(?:pr|pull request|merge request|mr)\s*#?\d+\b.{0,40}\b(?:awaiting|"
        r"waiting for|needs|pending|in)\s+review\b",
        r"\bbranch\s+[\w/.-]+\s+is\b.{0,40}\b(?:ahead|behind|out of date|stale|diverged)\b",
        r"\b(?:working (?:tree|directory)|worktree|staging area)\b.{0,30}\b(?:clean|dirty|uncommitted)\b",
        r"\b(?:currently|now)\s+on\s+branch\s+[\w/.-]+",
    ),
}

SUSPECT: dict[str, tuple[str, ...]] = {
    "version": (
        r"\bv\d+(?:\.\d+)+\b",
        r"\b(?:updated|upgraded|downgraded)\b.{0,40}\bto\s+(?:\w+\s+)?\d+(?:\.\d+)+\b",
        r"\b\d+\.\d+\.\d+\b",
        r"\bversion\s+\d+(?:\.\d+)*\b",
        r"\b(?:updated|upgraded|installed|reinstalled|patched|downgraded)\s+(?:the\s+|a\s+|an\s+|my\s+|her\s+|his\s+)?"
        r"(?:\w+\s+){0,2}(?:app|software|firmware|os|driver|package|library|cli|sdk|plugin|extension|"
        r"dependenc(?:y|ies)|update|release)\b",
        r"\b(?:update|upgrade|patch|hotfix|release)\s+(?:went|was|is|has been)\s+"
        r"(?:out|live|through|installed|rolled out|applied)\b",
    ),
    "heartbeat": (
        r"\b(?:check-in|checkin|status report|status update|"
        r"stand-?up update|health ?check|uptime|liveness|keep-?alive)\b",
        r"\ball (?:clear|quiet|green)\b",
        r"\bno (?:incidents|alerts|anomalies|outages)\b",
        r"\b(?:pinged|polled)\b.{0,30}\b(?:ok|fine|no answer|responded|up|down)\b",
    ),
    "benchmark": (
        r"\b(?:scores?|scored|accuracy|precision|recall|f1|latency|throughput|pass rate|success rate|error rate|"
        r"win rate|hit rate|perplexity|loss)\b.{0,40}\b\d+(?:\.\d+)?\s?(?:%|ms|qps|rps|x\b|/\s*\d+)",
        r"\b\d+\s*/\s*\d+\b.{0,30}\b(?:passed|correct|right|solved|cases|questions|tasks|prompts|samples)\b",
        r"\b(?:benchmark(?:s|ed|ing)?|eval(?:uation)?\s+(?:run|results?|scores?|set)|leaderboard|baseline\s+scores?)\b",
    ),
    "run_result": (
        rf"\b{_RUN_THING}\s+(?:#?\d+\s+)?(?:has\s+|had\s+|just\s+|finally\s+)?{_RUN_OUTCOME}\b",
        r"\b(?:tests?|specs?|checks?|ci|pipeline)\s+(?:are\s+|were\s+|all\s+)*(?:passing|failing|green|red)\b",
    ),
    "bug_sweep": (
        rf"\b{_NOTHING_FOUND}\s+(?:were\s+|was\s+)?(?:found|detected|spotted|reported|turned up)\b",
        r"\b(?:found|turned up)\s+(?:no|zero)\s+(?:bugs?|issues?|problems?|errors?|regressions?|defects?)\b",
        r"\bfixed\s+(?:a\s+|the\s+|two\s+|three\s+|several\s+|some\s+|a few\s+|a couple of\s+|\d+\s+)?"
        r"(?:\w+\s+)?(?:bugs?|glitch(?:es)?|crash(?:es)?|errors?|regressions?)\b",
        r"\b(?:bug|security)\s+(?:review|audit|hunt|triage)\b",
        r"\bcode audit\b",
    ),
    "ui_detail": (
        r"\b\d+\s?(?:px|rem|dp)\b",
        r"#[0-9a-f]{6}\b",
        r"\b(?:padding|margin|font[- ]size|border[- ]radius|z-index|flexbox|css|navbar|sidebar|dropdown|tooltip|"
        r"breakpoint|viewport|hover state|dark mode toggle)\b",
        r"\b(?:page|screen|app|site|dashboard|form|grid|settings|home ?page|landing page)\s+layout\b",
        r"\blayout of the (?:page|screen|app|site|dashboard|form|settings)\b",
        r"\b(?:button|header|footer|banner|menu|icon|tab|modal)\s+(?:is|was|now|moved|placed|aligned|colou?r)\b",
    ),
    "task_status": (
        r"\b(?:task|ticket|todo|to-do|subtask|user story|pr|pull request|milestone|sprint|deliverable|action item)\b"
        r"[^.]{0,60}\b(?:done|completed?|finished|closed|merged|resolved|in progress|blocked|pending|on hold|wip)\b",
        r"\b(?:completed|finished|wrapped up|closed|ticked off|checked off)\s+(?:the\s+|a\s+|an\s+)?(?:\w+\s+){0,2}"
        r"(?:task|ticket|todo|subtask|milestone|sprint|refactor|deliverable|action item|checklist)s?\b",
    ),
    "transient": (
        r"\b(?:currently|right now|at the moment|for now|this week|temporarily)\b.{0,50}\b(?:debugging|refactoring|"
        r"deploying|bisecting|investigating|migrating|blocked|waiting (?:for|on))\b",
        r"\b(?:branch|pr|build|ci|pipeline|staging|server|deploy(?:ment)?|release|sprint|repo)\b.{0,30}"
        r"\b(?:is|are)\s+(?:currently\s+|still\s+)?(?:down|broken|"
        r"failing|red|blocked|frozen|paused|stuck|in review|on hold)\b",
        r"\b(?:waiting (?:for|on)|blocked (?:on|by))\s+(?:the\s+|"
        r"a\s+)?(?:ci|build|review|deploy|pipeline|approval|merge|"
        r"code review)\b",
    ),
}

#: Texts that stay whatever else matches (both tiers): preferences; lessons, root causes
#: and standing instructions; facts about the person (age, family, studies and exams,
#: races and personal bests, sport).
GUARDS: tuple[str, ...] = (
    r"\b(?:prefers?|preferred|likes?|loves?|enjoys?|hates?|dislikes?|favou?rites?|wants?|would rather|fond of)\b",
    r"\b(?:because|root cause|caused by|due to|lesson|learned|learnt|always|never|whenever|should|must|to avoid|"
    r"so that|rule of thumb|make sure|remember to|every time|before (?:every|each|any))\b",
    r"\b(?:years? old|aged?\s+\d+|birthday|born|married|wife|husband|son|daughter|kids|children|"
    r"marathon|half[- ]marathon|triathlon|race|personal best|\bpb\b|degree|bachelor'?s?|master'?s|phd|doctorate|"
    r"diploma|graduated|gpa|\bsat\b|\bgre\b|salary|weighs?|kg|lbs|miles|km)\b",
    r"\b(?:exams?|midterms?|finals? exam|quiz|grades?|graded|school|college|university|proud|"
    r"goals?|football|soccer|basketball|hockey|tennis|tournament|championship|league|personal record|"
    r"(?:driving|theory|aptitude|entrance|placement|iq|blood|eye|hearing|pregnancy|covid|drug) tests?)\b",
)

# --- matching -----------------------------------------------------------------------


class _Pattern:
    """A pattern with a cheap pre-check: the same pattern without its leading ``\\b``.

    Python's ``re`` scans for a pattern's possible first characters only when the pattern
    does not begin with an assertion, so the pre-check runs about 1.5 times faster
    (``benchmarks/noise_tiers.py``); whatever the pattern matches, the pre-check matches
    too, and almost every text fails it, so the pattern itself rarely runs.
    """

    __slots__ = ("exact", "quick", "joined", "needs")

    def __init__(self, pattern: str) -> None:
        self.exact = re.compile(pattern)
        self.quick = re.compile(pattern[2:]) if pattern.startswith("\\b") else self.exact
        # The pre-check over many texts joined by ``_JOIN`` (``detect_all``): ``^`` at each text's start.
        self.joined = re.compile(self.quick.pattern, re.MULTILINE)
        #: Every match contains one of these strings (``text.patterns.required_literals``):
        #: where none occurs, the pattern cannot match and is not scanned (the time saved:
        #: docs/benchmarks.md, "Small users in batches").
        self.needs = required_literals(pattern)

    def search(self, text: str) -> re.Match[str] | None:
        return self.exact.search(text) if self.quick.search(text) else None


_COMPILED: dict[str, tuple[tuple[str, tuple[_Pattern, ...]], ...]] = {
    tier: tuple((name, tuple(_Pattern(p) for p in patterns)) for name, patterns in table.items())
    for tier, table in ((TIER_SURE, SURE), (TIER_SUSPECT, SUSPECT))
}
_GUARDS = tuple(_Pattern(p) for p in GUARDS)
_TIER_PATTERNS = tuple(p for tier in TIERS for _, patterns in _COMPILED[tier] for p in patterns)
_NEEDED = tuple(dict.fromkeys(literal for p in _TIER_PATTERNS for literal in p.needs))
#: Between joined texts: a newline (``.`` stops at it, ``^`` starts after it) after a
#: character no ``\s`` or ``\w`` matches, so a lookahead at a text's end sees what it would at
#: the end of the text alone.
_JOIN = "\x00\n"


@functools.cache
def _needed_automaton() -> ahocorasick.Automaton:
    """An Aho-Corasick automaton of ``_NEEDED`` (pyahocorasick), built on first use."""
    automaton = ahocorasick.Automaton()
    for index, literal in enumerate(_NEEDED):
        automaton.add_word(literal, index)
    automaton.make_automaton()
    return automaton


def needed_in(text: str) -> set[str]:
    """The strings of ``_NEEDED`` that occur in ``text``, from one Aho-Corasick scan
    (Aho and Corasick, CACM 1975) instead of one substring search per string (ten times
    faster: docs/benchmarks.md, "Measured constants"). Every occurrence is
    reported, overlapping ones included, so the set is ``{s for s in _NEEDED if s in text}``."""
    return {_NEEDED[index] for _, index in _needed_automaton().iter(text)}


@dataclass(frozen=True, kw_only=True)
class NoiseMatch:
    """Why a text may be noise: its category, the tier that flagged it (``TIER_SURE`` or
    ``TIER_SUSPECT``) and the words that matched."""

    category: str
    matched: str
    tier: str = TIER_SURE


def detect(content: str) -> NoiseMatch | None:
    """The noise match of ``content``, or None to keep it without asking anyone.

    A guard keeps the text outright; otherwise the sure tier is tried first (every
    category), then the suspect tier. Pure and deterministic; lower-cases the text and
    collapses its spaces.
    """
    text = " ".join(content.lower().split())
    if any(g.search(text) for g in _GUARDS):
        return None
    for tier in TIERS:
        for category, patterns in _COMPILED[tier]:
            for pattern in patterns:
                match = pattern.search(text)
                if match:
                    return NoiseMatch(category=category, matched=match.group(0), tier=tier)
    return None


def detect_all(contents: Sequence[str]) -> list[NoiseMatch | None]:
    """``detect`` of each of ``contents``, in order, in one scan per pattern.

    Every tier's pre-check runs once over the texts joined by ``_JOIN``; only a text that
    some match touches (almost none) goes through ``detect``. Exact: a text whose own
    search would match is touched by a match of the joined scan (at the same place, or by
    one that overlaps it), so every other text is one ``detect`` keeps.
    """
    texts = [" ".join(content.lower().split()) for content in contents]
    joined = _JOIN.join(texts)
    starts: list[int] = []
    at = 0
    for text in texts:
        starts.append(at)
        at += len(text) + len(_JOIN)
    touched: set[int] = set()
    # The strings some pattern needs, found in one scan (252 strings for 69 patterns).
    present = needed_in(joined)
    for pattern in _TIER_PATTERNS:
        if pattern.needs and present.isdisjoint(pattern.needs):
            continue
        for match in pattern.joined.finditer(joined):
            first, last = bisect_right(starts, match.start()) - 1, bisect_right(starts, match.end() - 1) - 1
            touched.update(range(first, last + 1))
    return [detect(content) if i in touched else None for i, content in enumerate(contents)]
