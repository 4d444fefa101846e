"""Replay a real model's recorded replies through litellm, to measure the judge's real path.

A recording is a JSONL file, one model call a line: ``set``, ``contract`` (``judge``,
``second_look``, ``relocate``, ...), ``prompt_version``, ``messages`` (as sent) and
``reply`` (the model's text, as ``choices[0].message.content`` carried it).

``ReplayServer`` is a small OpenAI-compatible HTTP server on 127.0.0.1 that answers
``POST /v1/chat/completions`` from the recordings, so the LLM judge talks to it through
litellm exactly as it talks to a provider:
- a judge call (wire contract v2): each incoming cluster is matched to a recorded one by
  its members' contents (ids are per call and change with batching); the recorded
  actions are answered with the aliases mapped onto this call's; a cluster with no
  match is answered "keep" and counted as a miss;
- a second look (``{"checks": [...]}``): each check is matched by its action, the
  contents of its truths and its merged content; without a recording it is answered by
  ``second_looks`` ("confirm" or "withdraw" every check), so a report can give both bounds;
- any other call: the recorded reply of the same last message, else an empty object.
A stage whose calls a recording holds none of (``unrecorded_stages``: mining, noise,
relocation, promotion) is not asked at all while ``replaying``: it runs as it does without
a model (``services.hygiene.withheld``), since no answer was recorded to give it.
The server counts what it saw (``ReplayStats``) and keeps the messages of every call it
could not answer wholly from the recordings (``unanswered``: what a new recording needs);
nothing here touches the database.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.test.utils import override_settings

from ..choices import REPLAY_MODEL
from ..conf import app_settings
from ..exceptions import InvalidInput
from ..llm import hygiene as stage_prompts
from ..llm.litellm_client import LiteLLMJudge
from ..llm.prompts import NOISE_SYSTEM_PROMPT
from ..services.hygiene import withheld
from ..services.pipeline.validation import Code
from . import pair_scoring, scoring
from .chat_server import ChatServer, Response, completion

BAD_RECORDING = "{path}:{line}: {problem}. Give a recording file (one JSON object a line)."
NO_RECORDING = "{path}: no such recording file."
SECOND_LOOK_ANSWERS = ("confirm", "withdraw")

#: The key of a recorded cluster: its members' contents, sorted.
ClusterKey = tuple[str, ...]


def _tagged_json(content: str, tag: str) -> dict[str, Any] | None:
    """The JSON object between ``<tag>`` and ``</tag>`` in ``content``, or None."""
    start, end = content.find(f"<{tag}>"), content.rfind(f"</{tag}>")
    if start < 0 or end < 0:
        return None
    try:
        data = json.loads(content[start + len(tag) + 2 : end])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _last_content(messages: list[dict[str, Any]]) -> str:
    content = messages[-1].get("content", "") if messages else ""
    if isinstance(content, list):  # a cacheable system prompt or parts: join the texts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


#: The stages that call a model, each with the system prompt of its calls: how a recorded
#: call without a ``contract`` is known as the stage's.
STAGE_PROMPTS = {
    "mine": stage_prompts.MINING_SYSTEM,
    "noise": NOISE_SYSTEM_PROMPT,
    "relocate": stage_prompts.RELOCATE_SYSTEM,
    "promote": stage_prompts.PROMOTE_SYSTEM,
}


def _stage_of(messages: list[dict[str, Any]]) -> str | None:
    """The stage whose system prompt opens ``messages`` (``STAGE_PROMPTS``), or None."""
    system = _last_content(messages[:1]) if messages and messages[0].get("role") == "system" else ""
    return next((stage for stage, prompt in STAGE_PROMPTS.items() if system == prompt), None)


@dataclass(frozen=True, kw_only=True)
class RecordedCluster:
    """One cluster of a recorded judge call: alias -> content, and the model's entry."""

    contents: dict[str, str]
    actions: tuple[dict[str, Any], ...]
    reasoning: str


@dataclass(kw_only=True)
class Recordings:
    """The recorded calls of one or more files, indexed for matching."""

    sets: tuple[str, ...] = ()
    #: The recorded model(s) and prompt versions (by contract), as the files name them.
    models: tuple[str, ...] = ()
    prompt_versions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    clusters: dict[ClusterKey, RecordedCluster] = field(default_factory=dict)
    second_looks: dict[tuple[str, ClusterKey, str], dict[str, Any]] = field(default_factory=dict)
    others: dict[str, str] = field(default_factory=dict)
    calls: int = 0
    #: The contracts of the recorded calls (judge, second_look, mine, relocate, ...).
    contracts: set[str] = field(default_factory=set)

    def add(self, row: dict[str, Any]) -> None:
        """Index one recorded call (a line of a recording file)."""
        messages, reply = row["messages"], str(row["reply"])
        content = _last_content(messages)
        self.calls += 1
        contract = (
            row.get("contract")
            or _stage_of(messages)
            or ("second_look" if _tagged_json(content, "checks") is not None else "judge")
        )
        self.contracts.add(str(contract))
        try:
            answer = json.loads(reply)
        except ValueError:
            answer = None
        if contract == "judge":
            sent = _tagged_json(content, "truths")
            if sent is None or not isinstance(answer, dict):
                return
            entries = {str(e.get("id")): e for e in answer.get("clusters", []) if isinstance(e, dict)}
            for cluster in sent.get("clusters", []):
                contents = {str(t["id"]): str(t["content"]) for t in cluster.get("truths", [])}
                entry = entries.get(str(cluster.get("id")), {})
                key = tuple(sorted(contents.values()))
                self.clusters.setdefault(
                    key,
                    RecordedCluster(
                        contents=contents,
                        actions=tuple(a for a in entry.get("actions", []) if isinstance(a, dict)),
                        reasoning=str(entry.get("reasoning", "")),
                    ),
                )
        elif contract == "second_look":
            sent = _tagged_json(content, "checks")
            if sent is None or not isinstance(answer, dict):
                return
            answers = {str(a.get("id")): a for a in answer.get("checks", []) if isinstance(a, dict)}
            for check in sent.get("checks", []):
                if str(check.get("id")) in answers:
                    self.second_looks.setdefault(_check_key(check), answers[str(check["id"])])
        else:
            self.others.setdefault(content, reply)


def _check_key(check: dict[str, Any]) -> tuple[str, ClusterKey, str]:
    contents = tuple(sorted(str(t.get("content", "")) for t in check.get("truths", [])))
    return str(check.get("action", "")), contents, str(check.get("content", ""))


def load_recordings(paths: Iterable[Path]) -> Recordings:
    """Read recording files, the first file's reply winning for a cluster two of them record.
    A file named ``*.replies.jsonl`` holds only ``{"id", "reply"}`` lines (as a model answerer
    writes them) and is read with the ``*.requests.jsonl`` beside it (``{"id", "messages"}``),
    joined by ``id``; a row without ``contract`` is a second look when its message holds
    ``<checks>``, else a judge call. Raises ``InvalidInput`` naming the first bad line or a
    missing file."""
    recordings = Recordings()
    sets: dict[str, None] = {}
    models: dict[str, None] = {}
    versions: dict[str, dict[str, None]] = {}
    for path in paths:
        if not path.is_file():
            raise InvalidInput(NO_RECORDING.format(path=path))
        if path.name.endswith(REPLIES_SUFFIX):
            rows = _joined_replies(path, recordings)
        else:
            rows = scoring.parse_lines(path, lambda raw: _add_line(recordings, raw), bad=BAD_RECORDING)
        for row in rows:
            for seen, value in ((sets, row.get("set")), (models, row.get("model"))):
                if value:
                    seen[str(value)] = None
            if row.get("prompt_version"):
                versions.setdefault(str(row.get("contract", "judge")), {})[str(row["prompt_version"])] = None
    recordings.sets, recordings.models = tuple(sets), tuple(models)
    recordings.prompt_versions = {contract: tuple(v) for contract, v in versions.items()}
    return recordings


REPLIES_SUFFIX = ".replies.jsonl"
REQUESTS_SUFFIX = ".requests.jsonl"
NO_REQUESTS = "{path}: a replies file is read with its requests file {requests}, which is missing."
NO_REQUEST = "no request with this id in {requests}"


def _joined_replies(path: Path, recordings: Recordings) -> list[dict[str, Any]]:
    """The rows of a replies file (``{"id", "reply"}``) joined to the messages of the
    requests file beside it, each indexed in ``recordings``; raises ``InvalidInput`` for a
    missing requests file, a bad line, or a reply whose id no request has."""
    requests_path = path.with_name(path.name[: -len(REPLIES_SUFFIX)] + REQUESTS_SUFFIX)
    if not requests_path.is_file():
        raise InvalidInput(NO_REQUESTS.format(path=path, requests=requests_path))
    messages = dict(scoring.parse_lines(requests_path, _request_line, bad=BAD_RECORDING))

    def joined(raw: str) -> dict[str, Any]:
        reply = json.loads(raw)
        if str(reply["id"]) not in messages:
            raise KeyError(NO_REQUEST.format(requests=requests_path.name))
        row = {"messages": messages[str(reply["id"])], "reply": reply["reply"]}
        recordings.add(row)
        return row

    return scoring.parse_lines(path, joined, bad=BAD_RECORDING)


def _request_line(raw: str) -> tuple[str, list[dict[str, Any]]]:
    """``(id, messages)`` of a requests file's line."""
    row = json.loads(raw)
    return str(row["id"]), list(row["messages"])


def _add_line(recordings: Recordings, raw: str) -> dict[str, Any]:
    """Index one line of a recording file (a JSON object with ``messages`` and ``reply``)
    in ``recordings``; returns the row. Raises what a bad line raises (``parse_lines``)."""
    row = json.loads(raw)
    if not isinstance(row, dict) or "messages" not in row or "reply" not in row:
        raise ValueError("a line needs 'messages' and 'reply'")
    recordings.add(row)
    return row


@dataclass
class ReplayStats:
    """What the replay server answered: clusters matched and missed, the actions it
    proposed (by kind), and the second looks it was asked (by answer)."""

    judge_calls: int = 0
    matched: int = 0
    missed: int = 0
    proposed: Counter[str] = field(default_factory=Counter)
    second_look_calls: int = 0
    second_looks: Counter[str] = field(default_factory=Counter)
    other_calls: int = 0

    @property
    def proposed_total(self) -> int:
        return sum(self.proposed.values())

    @property
    def checks_total(self) -> int:
        return sum(self.second_looks.values())


def _map_action(action: dict[str, Any], alias_of: dict[str, str]) -> dict[str, Any] | None:
    """``action`` with its recorded aliases replaced by this call's (None if one has no match)."""
    mapped = dict(action)
    try:
        if action.get("action") == "merge":
            mapped["ids"] = [alias_of[str(a)] for a in action.get("ids", [])]
        else:
            mapped["old"] = [alias_of[str(a)] for a in action.get("old", [])]
            mapped["new"] = alias_of[str(action.get("new"))]
    except KeyError:
        return None
    return mapped


class ReplayServer(ChatServer):
    """The replaying server; ``url`` is its ``/v1`` base for litellm's ``api_base``.

    ``second_looks`` answers a second look that has no recording: "confirm" or "withdraw".
    """

    def __init__(self, recordings: Recordings, *, second_looks: str = "confirm") -> None:
        if second_looks not in SECOND_LOOK_ANSWERS:
            raise ValueError(f"second_looks must be one of {', '.join(SECOND_LOOK_ANSWERS)}")
        super().__init__()
        self.recordings = recordings
        self.second_look_answer = second_looks
        self.stats = ReplayStats()
        #: The messages of each call with a cluster or a check the recordings do not answer.
        self.unanswered: list[list[dict[str, Any]]] = []
        self._lock = threading.Lock()

    def respond(self, path: str, payload: dict[str, Any], headers: dict[str, str]) -> Response:
        """A chat completion whose content is ``answer``'s reply to the call's messages."""
        messages = payload.get("messages", [])
        with self._lock:
            content = self.answer(messages)
        return Response(completion(content, model=payload.get("model", "replay"), usage=_usage(messages, content)))

    def answer(self, messages: list[dict[str, Any]]) -> str:
        """The reply text for a call's ``messages`` (see the module docstring)."""
        content = _last_content(messages)
        clusters = _tagged_json(content, "truths")
        if clusters is not None:
            missed = self.stats.missed
            reply = self._judge(clusters)
            if self.stats.missed > missed:
                self.unanswered.append(messages)
            return reply
        checks = _tagged_json(content, "checks")
        if checks is not None:
            unrecorded = self.stats.second_looks[self.second_look_answer]
            reply = self._second_look(checks)
            if self.stats.second_looks[self.second_look_answer] > unrecorded:
                self.unanswered.append(messages)
            return reply
        self.stats.other_calls += 1
        if content not in self.recordings.others:
            self.unanswered.append(messages)
        return self.recordings.others.get(content, "{}")

    def _judge(self, sent: dict[str, Any]) -> str:
        self.stats.judge_calls += 1
        entries = []
        for cluster in sent.get("clusters", []):
            truths = cluster.get("truths", [])
            recorded = self.recordings.clusters.get(tuple(sorted(str(t["content"]) for t in truths)))
            entry: dict[str, Any] = {"id": cluster.get("id"), "actions": [], "reasoning": "no recorded reply"}
            if recorded is None:
                self.stats.missed += 1
                entries.append(entry)
                continue
            self.stats.matched += 1
            free: dict[str, list[str]] = {}
            for t in truths:
                free.setdefault(str(t["content"]), []).append(str(t["id"]))
            alias_of = {alias: free[text].pop(0) for alias, text in recorded.contents.items() if free.get(text)}
            actions = [m for m in (_map_action(a, alias_of) for a in recorded.actions) if m is not None]
            self.stats.proposed.update(str(a.get("action")) for a in actions)
            entries.append({**entry, "actions": actions, "reasoning": recorded.reasoning})
        return json.dumps({"clusters": entries})

    def _second_look(self, sent: dict[str, Any]) -> str:
        self.stats.second_look_calls += 1
        answers = []
        for check in sent.get("checks", []):
            recorded = self.recordings.second_looks.get(_check_key(check))
            verdict = str(recorded.get("verdict")) if recorded else self.second_look_answer
            reason = str(recorded.get("reason", "")) if recorded else f"replay: every second look is a {verdict}"
            self.stats.second_looks["recorded " + verdict if recorded else verdict] += 1
            answers.append({"id": check.get("id"), "verdict": verdict, "reason": reason})
        return json.dumps({"checks": answers})


def _usage(messages: list[dict[str, Any]], reply: str) -> dict[str, int]:
    """Token counts for the reply's usage block: about four characters a token (no
    tokenizer of the recorded model is at hand; the figures only need to be comparable)."""
    sent = sum(len(_last_content([m])) for m in messages)
    prompt, completion = max(1, sent // 4), max(1, len(reply) // 4)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


# --- the measurement: one recording file through the real pipeline -------------------

#: Where each recorded set's data lies, relative to the recording file's folder.
SET_DATA = {
    "golden": "../judge_golden.jsonl",
    "public": "../public_cases.jsonl",
    "personachat": "../../data/personachat_revised.pairs.jsonl",
    "locomo": "../../data/locomo_observations.truths.jsonl",
}
UNKNOWN_SET = "{path}: recorded set {name!r} has no known data; give its data file with --data."
NO_DATA = "{path}: its data file {data} is missing; give it with --data."
NO_GIVEN_DATA = "--data {data}: no such file."
#: The key litellm sends to the replay server on 127.0.0.1 (it checks none).
REPLAY_KEY = "replay-not-a-secret"


@dataclass(frozen=True, kw_only=True)
class ReviewCounts:
    """What a pass's reviews say about the model's actions."""

    applied: int = 0
    applied_prepass: int = 0
    refusals: tuple[tuple[str, int], ...] = ()
    confirmed: int = 0
    clusters_acted_on: int = 0
    clusters_refused: int = 0

    @property
    def refused(self) -> int:
        return sum(n for _, n in self.refusals)


def count_reviews(reviews: Iterable[Any]) -> ReviewCounts:
    """Counts over ``ClusterReview`` rows: actions applied (by the model, by the pre-pass),
    refusals by code, second looks confirmed, clusters acted on and refused (a cluster
    with at least one refused action; stale members and the run's cap do not count)."""
    refusals: Counter[str] = Counter()
    applied = prepass = confirmed = acted = refused = 0
    for review in reviews:
        judged = [e for e in review.applied_actions if e.get("stage") == "judge"]
        applied += len(judged)
        prepass += len(review.applied_actions) - len(judged)
        confirmed += sum(1 for e in judged if e.get("second_look"))
        codes = [str(r.get("code", "")) for r in review.rejections or ()]
        counted = [c for c in codes if c not in (Code.STALE_MEMBER, Code.CAP_REACHED)]
        refusals.update(counted)
        if judged or counted:
            acted += 1
        if counted:
            refused += 1
    return ReviewCounts(
        applied=applied,
        applied_prepass=prepass,
        refusals=tuple(sorted(refusals.items(), key=lambda kv: (-kv[1], kv[0]))),
        confirmed=confirmed,
        clusters_acted_on=acted,
        clusters_refused=refused,
    )


@dataclass(frozen=True, kw_only=True)
class RecordedReport:
    """One recording replayed: the server's counts, the reviews' counts, and the set's
    own score (``golden`` for golden-set files, ``pairs`` for a pairs file)."""

    path: Path
    set_name: str
    second_looks: str
    #: The recordings replayed with ``path`` (``evaluate``'s ``also``).
    also: tuple[Path, ...] = ()
    stats: ReplayStats
    counts: ReviewCounts
    golden: Any = None
    pairs: Any = None
    clusters_judged: int = 0
    #: The messages of each call the recordings did not wholly answer (``ReplayServer.unanswered``).
    unanswered: tuple[list[dict[str, Any]], ...] = ()

    @property
    def sent_to_second_look(self) -> int:
        return self.stats.checks_total

    @property
    def second_look_share(self) -> float | None:
        proposed = self.stats.proposed_total
        return self.sent_to_second_look / proposed if proposed else None


def data_for(path: Path, set_name: str, data: Path | None = None) -> Path:
    """The data file of a recording (``SET_DATA``), or ``data`` when given; raises
    ``InvalidInput`` when there is none."""
    if data is not None:
        if not data.is_file():
            raise InvalidInput(NO_GIVEN_DATA.format(data=data))
        return data
    if set_name not in SET_DATA:
        raise InvalidInput(UNKNOWN_SET.format(path=path, name=set_name))
    data = (path.parent / SET_DATA[set_name]).resolve()
    if not data.is_file():
        raise InvalidInput(NO_DATA.format(path=path, data=data))
    return data


@contextmanager
def replaying(paths: Iterable[Path], *, second_looks: str = "withdraw") -> Iterator[tuple[LiteLLMJudge, ReplayServer]]:
    """The LLM judge answered by a ``ReplayServer`` of the recordings ``paths``, for the
    duration of the block: ``(client, server)``; ``server.stats`` and ``server.recordings``
    say what was replayed. A second look with no recording is answered ``second_looks``
    ("withdraw" by default: an unrecorded risky action is not applied). For the block the
    settings name that server as the LLM judge too, so the pass's other model calls (the
    part-2 stages build their client from the settings) reach it rather than a provider;
    the placeholder key is for 127.0.0.1 only. A stage of which the recordings hold no call
    (``unrecorded_stages``) asks no model in the block: it runs as it does offline. Raises
    ``InvalidInput`` for a bad or missing file (``load_recordings``)."""
    recordings = load_recordings(paths)
    with (
        ReplayServer(recordings, second_looks=second_looks) as server,
        override_settings(
            IRIS_CONSOLIDATION_JUDGE="llm",
            IRIS_CONSOLIDATION_MODEL=REPLAY_MODEL,
            IRIS_CONSOLIDATION_LLM_API_BASE=server.url,
            IRIS_CONSOLIDATION_VERIFY_MODEL="",
        ),
        _placeholder_key(),
        withheld.withholding(unrecorded_stages(recordings)),
    ):
        yield replay_client(server.url), server


def unrecorded_stages(recordings: Recordings) -> tuple[str, ...]:
    """The stages that call a model (``STAGE_PROMPTS``) of which ``recordings`` hold no call,
    in pass order: ``replaying`` withholds their calls (they run as without a model)."""
    return tuple(stage for stage in STAGE_PROMPTS if stage not in recordings.contracts)


@contextmanager
def _placeholder_key() -> Iterator[None]:
    """``OPENAI_API_KEY`` is ``REPLAY_KEY`` for the block (a real key is never sent to the
    replay server), then what it was. Only that variable is restored: litellm sets others
    (its tokenizer cache) when first imported inside the block, and they must stay."""
    before = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = REPLAY_KEY
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = before


def replay_client(url: str) -> LiteLLMJudge:
    """The LLM judge pointed at a replay server (no provider key: the server is ours)."""
    return LiteLLMJudge(
        model=REPLAY_MODEL,
        api_base=url,
        timeout=float(app_settings.LLM_TIMEOUT),
        attempts=int(app_settings.LLM_ATTEMPTS),
        api_key=REPLAY_KEY,
    )


def evaluate(
    path: Path, *, embedder: Any, second_looks: str = "confirm", data: Path | None = None, also: Sequence[Path] = ()
) -> RecordedReport:
    """Replay the recording ``path`` through litellm into the real pipeline, on its set's
    data (``data_for``), and score it: golden and public by their cases, a pairs file
    by its labels, a truths file by its reviews alone. ``also``: more recordings replayed
    with it (new replies for the groups ``path`` misses; ``path``'s reply wins for a
    cluster both record; its set names the data). ``second_looks`` answers the second looks
    that have no recording. Raises ``InvalidInput`` for a bad or missing file. Writes
    nothing that outlives the call.
    """
    recordings = load_recordings([path, *also])
    set_name = recordings.sets[0] if recordings.sets else ""  # ``path``'s first: it is read first
    data_path = data_for(path, set_name, data)
    reviews: list[Any] = []
    golden = pairs = None
    judged = 0
    with ReplayServer(recordings, second_looks=second_looks) as server:
        client = replay_client(server.url)
        if data_path.name.endswith(".pairs.jsonl"):
            pairs = pair_scoring.score_pairs(
                data_path,
                threshold=_default_threshold(),
                client=client,
                embedder=embedder,
                on_reviews=reviews.extend,
            )
        elif set_name in ("golden", "public") or _looks_like_cases(data_path):
            cases = scoring.load_cases(data_path)
            golden = scoring.score_golden(cases, client=client, embedder=embedder, on_reviews=reviews.extend)
        else:
            judged = scoring.score_truths(data_path, client=client, embedder=embedder, on_reviews=reviews.extend)
        stats, unanswered = server.stats, tuple(server.unanswered)
    return RecordedReport(
        path=path,
        also=tuple(also),
        set_name=set_name,
        second_looks=second_looks,
        stats=stats,
        counts=count_reviews(reviews),
        golden=golden,
        pairs=pairs,
        clusters_judged=judged,
        unanswered=unanswered,
    )


def write_requests(path: Path, calls: Sequence[list[dict[str, Any]]]) -> int:
    """Write ``calls`` (each a call's messages) to ``path`` as a requests file for a model
    answerer: one ``{"id", "messages"}`` line per call, ids ``<name>-001``, ... (``name``:
    the file name up to its first dot), the answers to go in ``<name>.replies.jsonl``
    beside it (``load_recordings``). Returns the number of lines written."""
    name = path.name.split(".")[0]
    with path.open("w", encoding="utf-8") as handle:
        for i, messages in enumerate(calls, start=1):
            handle.write(json.dumps({"id": f"{name}-{i:03d}", "messages": messages}, ensure_ascii=False) + "\n")
    return len(calls)


def _default_threshold() -> float:
    return float(app_settings.SIMILARITY_THRESHOLD)


def _looks_like_cases(path: Path) -> bool:
    """Whether the first line of ``path`` is a golden case (it has ``expected``)."""
    with path.open(encoding="utf-8") as handle:
        first = next((line for line in handle if line.strip()), "{}")
    try:
        return "expected" in json.loads(first)
    except ValueError:
        return False
