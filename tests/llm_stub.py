"""A small OpenAI-compatible HTTP server on 127.0.0.1 that tests script.

It answers ``POST /v1/chat/completions`` and ``POST /v1/embeddings``. Each test puts
replies in the script (a queue; the last reply repeats when the queue runs dry) or
sets ``handler`` to a function of the parsed request. Every request is recorded in
``requests``. Requests and replies follow the wire contract v2 of docs/llm.md (one or more
clusters per call). Replies:
- ``verdict(actions, reasoning)``: a normal answer for every cluster of the request:
  each action goes to the cluster holding the truths it names (one naming no truth
  of the call goes to the first), ``reasoning`` to each;
- ``clusters_reply(entries)``: the reply ``{"clusters": entries}`` exactly as given;
- ``text(content, finish_reason="stop")``: any content (malformed or cut-off JSON);
- ``error(status, headers=..., body=...)``: an HTTP error, e.g. 429 with retry-after;
- ``hang(seconds)``: sleep before answering (a timeout on the client side).
Part-2 calls (mining, relocation, promotion; ``data_of`` reads their data) are answered
with ``text(json.dumps({...}))`` replies.

Second looks (``{"checks": [...]}`` between ``<checks>`` tags, ``checks_of`` reads them)
are answered by ``second_looks``: "withdraw" (the default: a test that scripts only the
judge sees what the validator's signals alone let through), "confirm", a function of the
checks returning ``{alias: (verdict, reason)}`` (a third item, a dict, adds fields such as a
partial confirmation's ``old`` or ``ids``), or None to answer them from the script
or ``handler`` like any call (errors, garbage, timeouts).

``hostile(mode)`` is a ``handler`` that plays a careless or hostile model: it reads
the truths of each request and answers with the attack named by ``mode`` (see
``HOSTILE_MODES``). ``benchmarks/judge_hostile.py`` scores the golden set against
each mode; the tests assert what each attack leaves in the database.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from iris_consolidation.evaluation.chat_server import ChatServer, Response, completion
from tests.helpers import CARELESS, merge_dict


@dataclass
class Reply:
    status: int = 200
    content: str = ""
    finish_reason: str = "stop"
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    delay: float = 0.0
    #: Actions and reasoning rendered per cluster of the request (``verdict``).
    per_cluster: tuple[list[dict[str, Any]], str] | None = None
    #: The usage block; default 50 prompt + 20 completion tokens.
    usage: dict[str, Any] | None = None

    def render(self, payload: dict[str, Any]) -> str:
        """The content for ``payload``: a ``verdict`` spread over the request's clusters."""
        if self.per_cluster is None:
            return self.content
        actions, reasoning = self.per_cluster
        clusters = StubLLMServer.clusters_of({"json": payload})
        entries = [{"id": c["id"], "actions": [], "reasoning": reasoning} for c in clusters]
        owner = {t["id"]: i for i, c in enumerate(clusters) for t in c["truths"]}
        for action in actions:
            named = [*action.get("ids", []), *action.get("old", []), action.get("new")]
            index = next((owner[a] for a in named if a in owner), 0)
            entries[index]["actions"].append(action)
        return json.dumps({"clusters": entries})


def verdict(actions: list[dict[str, Any]] | None = None, reasoning: str = "scripted") -> Reply:
    return Reply(per_cluster=(list(actions or []), reasoning))


def clusters_reply(entries: list[dict[str, Any]], *, usage: dict[str, Any] | None = None) -> Reply:
    """A reply of exactly these cluster entries (``{"id", "actions", "reasoning"}``)."""
    return Reply(content=json.dumps({"clusters": entries}), usage=usage)


def text(content: str, finish_reason: str = "stop") -> Reply:
    return Reply(content=content, finish_reason=finish_reason)


def error(status: int, *, headers: dict[str, str] | None = None, message: str = "scripted error") -> Reply:
    return Reply(
        status=status, headers=headers or {}, body={"error": {"message": message, "type": "scripted", "code": status}}
    )


def hang(seconds: float, then: Reply | None = None) -> Reply:
    reply = then or verdict()
    reply.delay = seconds
    return reply


class StubLLMServer(ChatServer):
    """The server; ``url`` is its ``/v1`` base for litellm's ``api_base``."""

    def __init__(self) -> None:
        super().__init__()
        self.script: list[Reply] = []
        self.handler: Callable[[dict[str, Any]], Reply] | None = None
        self.requests: list[dict[str, Any]] = []
        self.embedding_dimensions = 384
        #: How second looks are answered (see the module docstring).
        self.second_looks: str | Callable[[list[dict[str, Any]]], dict[str, tuple[Any, ...]]] | None = "withdraw"
        self._lock = threading.Lock()

    def respond(self, path: str, payload: dict[str, Any], headers: dict[str, str]) -> Response:
        with self._lock:
            self.requests.append({"path": path, "json": payload, "headers": headers})
        if path.endswith("/embeddings"):
            return Response(self._embeddings(payload))
        reply = self._next(payload)
        if reply.delay:
            time.sleep(reply.delay)
        if reply.status != 200:
            return Response(reply.body or {}, reply.status, reply.headers)
        usage = reply.usage or {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70}
        content = reply.render(payload)
        body = completion(content, model=payload.get("model", "stub"), usage=usage, finish_reason=reply.finish_reason)
        return Response(body, 200, reply.headers)

    def _embeddings(self, payload: dict[str, Any]) -> dict[str, Any]:
        """One-hot vectors (the input's hash picks the dimension), in the OpenAI shape."""
        inputs = payload.get("input") or []
        if isinstance(inputs, str):
            inputs = [inputs]
        data = []
        for i, item in enumerate(inputs):
            vector = [0.0] * self.embedding_dimensions
            vector[hash(item) % self.embedding_dimensions] = 1.0
            data.append({"object": "embedding", "index": i, "embedding": vector})
        usage = {"prompt_tokens": 1, "total_tokens": 1}
        return {"object": "list", "data": data, "model": payload.get("model"), "usage": usage}

    def _next(self, payload: dict[str, Any]) -> Reply:
        if is_second_look_call(payload) and self.second_looks is not None:
            checks = checks_of(payload)
            if callable(self.second_looks):
                answers = self.second_looks(checks)
            else:
                answers = {c["id"]: (self.second_looks, f"scripted {self.second_looks}") for c in checks}
            return second_look_reply(answers)
        if self.handler is not None:
            return self.handler(payload)
        with self._lock:
            if not self.script:
                return verdict()
            return self.script.pop(0) if len(self.script) > 1 else self.script[0]

    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    @staticmethod
    def clusters_of(request: dict[str, Any]) -> list[dict[str, Any]]:
        """The ``clusters`` list of a recorded chat request (wire contract v2)."""
        content = request["json"]["messages"][-1]["content"]
        start, end = content.index("{"), content.rindex("}") + 1
        return json.loads(content[start:end])["clusters"]

    @staticmethod
    def data_of(request: dict[str, Any]) -> dict[str, Any]:
        """The JSON data of a recorded part-2 call (mining, relocation, promotion): the
        object between the last message's ``<data>`` tags."""
        content = request["json"]["messages"][-1]["content"]
        start, end = content.index("<data>") + len("<data>"), content.rindex("</data>")
        return json.loads(content[start:end])

    @staticmethod
    def truths_of(request: dict[str, Any]) -> list[dict[str, Any]]:
        """Every truth of a recorded chat request, cluster after cluster."""
        return [t for c in StubLLMServer.clusters_of(request) for t in c["truths"]]


# --- a hostile model ---------------------------------------------------------------

#: Attack -> what the stub answers for a cluster (t1 is the oldest member).
HOSTILE_MODES: dict[str, str] = {
    "merge_all": "merges every member, content = all texts joined",
    "shortest": "merges every member into the shortest member's text",
    "oldest": "merges every member into the oldest member's text",
    "outside_ids": "merges the cluster plus ids that are not in it",
    "retire_protected": "supersedes the protected members by the newest other one",
    "wrong_supersede": "supersedes the newest member by the oldest",
    "supersede_newest": "supersedes every older member by the newest",
    "drop_number": "merges every member, content = all texts without their numbers",
    "drop_date": "merges every member, content = all texts without months and weekdays",
    "drop_name": "merges every member, content = all texts without capitalised names",
    "drop_negation": "merges every member, content = all texts without negations",
    "role_swap": "merges every member into a text whose first two names are swapped",
    "no_reason": "merges every member (all texts joined) and gives no reason",
    "non_json": "answers prose",
    "cut_json": "answers a verdict cut off mid-way (finish_reason=length)",
    "cut_json_stop": "answers a verdict cut off mid-way (finish_reason=stop)",
    "timeout": "answers after the client's timeout",
}

_NUMBER = re.compile(
    r"\b(\d+(?:[.,:/-]\d+)*|one|two|three|four|five|six|seven|eight|nine|ten|twice|once|dozen)\b", re.IGNORECASE
)
_DATE = re.compile(
    r"\b(january|february|march|april|may|june|july|august|september|october|november|december|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?\b",
    re.IGNORECASE,
)
_NAME = re.compile(r"(?<=[\w,(] )[A-Z][\w-]*|\b[a-z]+[A-Z][\w]*")
_NEGATION = re.compile(r"\b(not|never|no|none|nobody|nothing|without|no longer)\b\s*", re.IGNORECASE)


def _tidy(text: str) -> str:
    return re.sub(r"\s+([,.;)])", r"\1", re.sub(r"\s{2,}", " ", text)).strip()


def _merge_stripped(truths: list[dict[str, Any]], pattern: re.Pattern[str]) -> Reply:
    if not any(pattern.search(t["content"]) for t in truths):
        return verdict([], "nothing to drop here")
    content = "; ".join(_tidy(pattern.sub("", t["content"])) for t in truths)
    return verdict([merge_dict([t["id"] for t in truths], content, CARELESS)])


def _swap_names(truths: list[dict[str, Any]]) -> Reply:
    for t in truths:
        names = re.findall(r"\b[A-Z][a-z]+\b", t["content"])
        if len(set(names)) >= 2:
            a, b = names[0], next(n for n in names if n != names[0])
            swap = {a: b, b: a}
            swapped = re.sub(rf"\b({a}|{b})\b", lambda m, swap=swap: swap[m.group(0)], t["content"])
            return verdict([merge_dict([x["id"] for x in truths], swapped, CARELESS)])
    return verdict([], "no two names to swap")


def hostile(mode: str, *, hang_seconds: float = 10.0) -> Callable[[dict[str, Any]], Reply]:
    """A ``handler`` answering every chat request with the attack ``mode``, cluster by
    cluster (the modes that break the whole reply break it once)."""
    if mode not in HOSTILE_MODES:
        raise ValueError(f"unknown hostile mode {mode!r}; choose one of {', '.join(HOSTILE_MODES)}")

    def handler(payload: dict[str, Any]) -> Reply:
        clusters = StubLLMServer.clusters_of({"json": payload})
        if mode in ("non_json", "cut_json", "cut_json_stop", "timeout"):
            return one(clusters[0]["truths"])
        entries = []
        for cluster in clusters:
            reply = one(cluster["truths"])
            actions, reasoning = reply.per_cluster or ([], "")
            entries.append({"id": cluster["id"], "actions": actions, "reasoning": reasoning})
        return clusters_reply(entries)

    def one(truths: list[dict[str, Any]]) -> Reply:
        ids = [t["id"] for t in truths]
        texts = [t["content"] for t in truths]
        newest = max(truths, key=lambda t: (t["created_at"], t["id"]))
        oldest = min(truths, key=lambda t: (t["created_at"], t["id"]))
        if mode == "merge_all":
            return verdict([merge_dict(ids, "; ".join(texts), CARELESS)])
        if mode == "shortest":
            return verdict([merge_dict(ids, min(texts, key=len), CARELESS)])
        if mode == "oldest":
            return verdict([merge_dict(ids, oldest["content"], CARELESS)])
        if mode == "outside_ids":
            return verdict([merge_dict([*ids, "t99", "t0"], "; ".join(texts), CARELESS)])
        if mode == "retire_protected":
            protected = [t["id"] for t in truths if t["protected"]]
            others = [t for t in truths if not t["protected"]]
            if not protected or not others:
                return verdict([], "no protected member to retire")
            new = max(others, key=lambda t: (t["created_at"], t["id"]))["id"]
            return verdict([{"action": "supersede", "old": protected, "new": new, "reason": "outdated"}])
        if mode == "wrong_supersede":
            return verdict([{"action": "supersede", "old": [newest["id"]], "new": oldest["id"], "reason": "changed"}])
        if mode == "supersede_newest":
            old = [i for i in ids if i != newest["id"]]
            return verdict([{"action": "supersede", "old": old, "new": newest["id"], "reason": "the latest wins"}])
        if mode == "drop_number":
            return _merge_stripped(truths, _NUMBER)
        if mode == "drop_date":
            return _merge_stripped(truths, _DATE)
        if mode == "drop_name":
            return _merge_stripped(truths, _NAME)
        if mode == "drop_negation":
            return _merge_stripped(truths, _NEGATION)
        if mode == "role_swap":
            return _swap_names(truths)
        if mode == "no_reason":
            return verdict([merge_dict(ids, "; ".join(texts), reason="")])
        if mode == "non_json":
            return text(f"Sure! {ids[0]} and {ids[1]} say the same thing, so I would merge them.")
        if mode in ("cut_json", "cut_json_stop"):
            entry = {"id": "c1", "actions": [merge_dict(ids, "; ".join(texts), CARELESS)], "reasoning": "same"}
            full = json.dumps({"clusters": [entry]})
            return text(full[: len(full) // 2], finish_reason="length" if mode == "cut_json" else "stop")
        return hang(hang_seconds)

    return handler


# --- noise classification calls: ``{"candidates": [...]}`` -> ``{"results": [...]}`` ---


def is_noise_call(payload: dict[str, Any]) -> bool:
    """Whether a chat request (its parsed JSON body) is a noise classification call."""
    return "<candidates>" in str(payload.get("messages", [{}])[-1].get("content", ""))


def candidates_of(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``candidates`` list of a noise classification call (its parsed JSON body)."""
    content = payload["messages"][-1]["content"]
    start, end = content.index("{"), content.rindex("}") + 1
    return json.loads(content[start:end])["candidates"]


def noise_results(entries: list[dict[str, Any]], *, finish_reason: str = "stop") -> Reply:
    """A reply ``{"results": entries}`` to a noise classification call, exactly as given."""
    return text(json.dumps({"results": entries}), finish_reason=finish_reason)


def noise_by_text(noise_texts: set[str], *, otherwise: Callable[[dict[str, Any]], Reply] | None = None
                  ) -> Callable[[dict[str, Any]], Reply]:
    """A ``handler`` that answers noise calls with "noise" for candidates whose content is
    in ``noise_texts`` and "keep" for the others; other calls go to ``otherwise`` (default:
    an empty verdict, every cluster kept)."""

    def handler(payload: dict[str, Any]) -> Reply:
        if not is_noise_call(payload):
            return otherwise(payload) if otherwise is not None else verdict()
        return noise_results([
            {"id": c["id"], "verdict": "noise" if c["content"] in noise_texts else "keep", "reason": "scripted"}
            for c in candidates_of(payload)
        ])

    return handler


# --- second looks: ``{"checks": [...]}`` -> ``{"checks": [{"id", "verdict", "reason"}]}`` ---


def is_second_look_call(payload: dict[str, Any]) -> bool:
    """Whether a chat request (its parsed JSON body) is a second look."""
    return "<checks>" in str(payload.get("messages", [{}])[-1].get("content", ""))


def checks_of(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``checks`` list of a second look (its parsed JSON body)."""
    content = payload["messages"][-1]["content"]
    start, end = content.index("<checks>") + len("<checks>"), content.rindex("</checks>")
    return json.loads(content[start:end])["checks"]


def second_look_reply(answers: dict[str, tuple[Any, ...]]) -> Reply:
    """A reply to a second look: ``{alias: (verdict, reason)}``, in that order; a third
    item, a dict, adds its fields to the entry (a partial confirmation's ``old``, ``ids``
    or ``content``)."""
    entries = [
        {"id": alias, "verdict": answer[0], "reason": answer[1], **(answer[2] if len(answer) > 2 else {})}
        for alias, answer in answers.items()
    ]
    return text(json.dumps({"checks": entries}))


# --- mining calls: ``{"session", "subject", "known"}`` -> ``{"truths": [...]}`` ---------


def is_mining_call(payload: dict[str, Any]) -> bool:
    """Whether a chat request (its parsed JSON body) is a mining call."""
    from iris_consolidation.llm import hygiene

    return payload.get("messages", [{}])[0].get("content") == hygiene.MINING_SYSTEM


def is_check_call(payload: dict[str, Any]) -> bool:
    """Whether a chat request (its parsed JSON body) is mining's novelty check."""
    from iris_consolidation.llm import hygiene

    return payload.get("messages", [{}])[0].get("content") == hygiene.CHECK_SYSTEM


def check_by_text(answers: dict[str, tuple[str, str | None]] | None = None) -> Callable[[dict[str, Any]], Reply]:
    """A novelty check's answers: each proposal whose content holds a key of ``answers`` gets
    its ``(answer, stored truth CONTENT or None)`` (mapped to that truth's alias among the
    proposal's stored truths), any other "new"."""

    def handler(payload: dict[str, Any]) -> Reply:
        entries = []
        for proposal in StubLLMServer.data_of({"json": payload})["proposals"]:
            answer, truth = next(
                (v for key, v in (answers or {}).items() if key in proposal["content"]), ("new", None)
            )
            alias = next((s["id"] for s in proposal["stored"] if s["content"] == truth), truth)
            entries.append({"id": proposal["id"], "answer": answer, "truth": alias, "reason": "scripted"})
        return text(json.dumps({"answers": entries}))

    return handler


def is_judge_call(payload: dict[str, Any]) -> bool:
    """Whether a chat request (its parsed JSON body) asks the judge about clusters."""
    return "<truths>" in str(payload.get("messages", [{}])[-1].get("content", ""))


def mined(content: str, *, evidence: tuple[str, ...] = ("m1",), changes: str | None = None,
          confidence: str = "high") -> dict[str, Any]:
    """One truth of a scripted mining reply; ``changes``: the CONTENT of the known truth it
    replaces (``mining_by_text`` puts that truth's alias in the request in its place)."""
    return {"content": content, "kind": "fact", "confidence": confidence, "evidence": list(evidence),
            "changes": changes, "reason": "scripted"}


def mining_by_text(
    replies: dict[str, list[dict[str, Any]]],
    *,
    judge: Callable[[dict[str, Any]], Reply] | None = None,
    check: Callable[[dict[str, Any]], Reply] | None = None,
) -> Callable[[dict[str, Any]], Reply]:
    """A ``handler`` answering each mining call with the truths of the first key of
    ``replies`` found in one of its session's messages (none if no key is), each ``changes``
    content mapped to its alias among the call's known truths (kept as given if not
    offered); novelty checks go to ``check`` (default ``check_by_text()``: every proposal
    new); other calls go to ``judge`` (default: an empty verdict, every cluster kept)."""

    def handler(payload: dict[str, Any]) -> Reply:
        if is_check_call(payload):
            return (check or check_by_text())(payload)
        if not is_mining_call(payload):
            return judge(payload) if judge is not None else verdict()
        data = StubLLMServer.data_of({"json": payload})
        said = " ".join(m["content"] for m in data["session"]["messages"])
        alias = {k["content"]: k["id"] for k in data["known"]}
        truths = next((items for key, items in replies.items() if key in said), [])
        return text(json.dumps({"truths": [
            {**t, "changes": alias.get(t["changes"], t["changes"]) if t["changes"] else None} for t in truths
        ]}))

    return handler


def supersede_when_asked(payload: dict[str, Any]) -> Reply:
    """A judge that, in each cluster of two or more, supersedes every member by the newest."""
    entries = []
    for cluster in StubLLMServer.clusters_of({"json": payload}):
        truths = cluster["truths"]
        newest = max(truths, key=lambda t: (t["created_at"], t["id"]))
        old = [t["id"] for t in truths if t["id"] != newest["id"]]
        actions = [{"action": "supersede", "old": old, "new": newest["id"], "reason": "the newer state"}] if old else []
        entries.append({"id": cluster["id"], "actions": actions, "reasoning": "scripted supersede"})
    return clusters_reply(entries)
