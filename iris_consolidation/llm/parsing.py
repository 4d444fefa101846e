"""Raw model text -> ``Verdict``: strict, pure functions.

Accepts one JSON object ``{"clusters": [{"id", "actions", "reasoning"}, ...]}`` (wire
contract v2), optionally inside a ```json fence. Anything else (prose,
truncated JSON, wrong types, unknown action names) raises ``JudgeResponseInvalid``
with the raw text. Ids are not checked against the cluster here: the validator does
that, so the rejection is recorded with its reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ..exceptions import JudgeResponseInvalid
from .base import Action

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)

NOT_JSON = "The judge's reply is not a JSON object."
BAD_SHAPE = "The judge's reply does not follow the verdict contract: {detail}."
DUPLICATE_KEY = "a key appears twice in one object ({key!r})"
MISSING_CLUSTER = "cluster {id!r} is missing from the reply"
TWICE_CLUSTER = "cluster {id!r} is answered twice"


def _fail(detail: str, raw: str) -> JudgeResponseInvalid:
    return JudgeResponseInvalid(BAD_SHAPE.format(detail=detail), raw=raw)


def _str_list(value: Any, field: str, raw: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(f"'{field}' must be a list of ids", raw)
    return tuple(value)


def parse_action(item: Any, raw: str) -> Action:
    """One wire action -> ``Action``; raises ``JudgeResponseInvalid``."""
    if not isinstance(item, dict):
        raise _fail("each action must be an object", raw)
    kind = item.get("action")
    reason = item.get("reason", "")
    if not isinstance(reason, str):
        raise _fail("'reason' must be a string", raw)
    if kind == "merge":
        content = item.get("content", "")
        if not isinstance(content, str):
            raise _fail("'content' must be a string", raw)
        return Action(action="merge", ids=_str_list(item.get("ids"), "ids", raw), content=content, reason=reason)
    if kind == "supersede":
        new = item.get("new")
        if not isinstance(new, str):
            raise _fail("'new' must be one id", raw)
        return Action(action="supersede", old=_str_list(item.get("old"), "old", raw), new=new, reason=reason)
    raise _fail(f"unknown action {kind!r}", raw)


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def _load_object(raw: str) -> dict[str, Any]:
    """The reply's one JSON object; raises ``JudgeResponseInvalid`` otherwise."""
    text = raw.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        raise _fail(DUPLICATE_KEY.format(key=str(exc)), raw) from exc
    except (json.JSONDecodeError, ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise JudgeResponseInvalid(NOT_JSON, raw=raw) from exc
    if not isinstance(data, dict):
        raise JudgeResponseInvalid(NOT_JSON, raw=raw)
    return data


def _parse_entry(data: dict[str, Any], raw: str) -> tuple[tuple[Action, ...], str]:
    actions = data.get("actions")
    if not isinstance(actions, list):
        raise _fail("'actions' must be a list", raw)
    reasoning = data.get("reasoning", "")
    if not isinstance(reasoning, str):
        raise _fail("'reasoning' must be a string", raw)
    return tuple(parse_action(item, raw) for item in actions), reasoning


def parse_batch(raw: str, ids: Sequence[str]) -> list[tuple[tuple[Action, ...], str] | JudgeResponseInvalid]:
    """Parse a reply to a call over the clusters ``ids`` (wire contract v2).

    Returns, per id in order, ``(actions, reasoning)`` or the ``JudgeResponseInvalid``
    saying why that cluster has no verdict: left out of the reply, named twice, or an
    entry of the wrong shape. Entries for ids not in the call are ignored. Raises
    ``JudgeResponseInvalid`` when the reply as a whole is not one JSON object with a
    ``clusters`` list (non-JSON, truncated, text around it, a key given twice).
    """
    data = _load_object(raw)
    entries = data.get("clusters")
    if not isinstance(entries, list):
        raise _fail("'clusters' must be a list", raw)
    found: dict[str, list[Any]] = {}
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            found.setdefault(entry["id"], []).append(entry)
    results: list[tuple[tuple[Action, ...], str] | JudgeResponseInvalid] = []
    for cid in ids:
        named = found.get(cid, [])
        if not named:
            results.append(_fail(MISSING_CLUSTER.format(id=cid), raw))
        elif len(named) > 1:
            results.append(_fail(TWICE_CLUSTER.format(id=cid), raw))
        else:
            try:
                results.append(_parse_entry(named[0], raw))
            except JudgeResponseInvalid as exc:
                results.append(exc)
    return results


def parse_verdict(raw: str) -> tuple[tuple[Action, ...], str]:
    """Parse a reply to a one-cluster call (id ``c1``) into ``(actions, reasoning)``.

    Raises ``JudgeResponseInvalid`` for anything ``parse_batch`` refuses, and for a
    reply without a valid entry for ``c1``.
    """
    result = parse_batch(raw, ["c1"])[0]
    if isinstance(result, JudgeResponseInvalid):
        raise result
    return result


# --- noise classification (``prompts.NOISE_SYSTEM_PROMPT``) ---

NOISE_VERDICTS = ("noise", "keep")


def parse_noise(raw: str, ids: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Parse a reply to a noise classification call over the candidates ``ids``.

    Returns ``(noise, reasons)``: ``noise`` maps each candidate the model confirmed as
    noise to its reason; ``reasons`` holds the reason of every well-formed entry. Keep on
    doubt: a candidate left out, answered twice, with another verdict than "noise", an
    empty reason, or an entry of the wrong shape is kept. Entries for ids not in the call
    are ignored. Raises ``JudgeResponseInvalid`` when the reply as a whole is not one JSON
    object with a ``results`` list (then every candidate is kept by the caller).
    """
    data = _load_object(raw)
    entries = data.get("results")
    if not isinstance(entries, list):
        raise _fail("'results' must be a list", raw)
    wanted = set(ids)
    seen: dict[str, int] = {}
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            seen[entry["id"]] = seen.get(entry["id"], 0) + 1
    noise: dict[str, str] = {}
    reasons: dict[str, str] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        cid, verdict, reason = entry.get("id"), entry.get("verdict"), entry.get("reason")
        if not isinstance(cid, str) or cid not in wanted or seen.get(cid, 0) != 1:
            continue
        if verdict not in NOISE_VERDICTS or not isinstance(reason, str) or not reason.strip():
            continue
        reasons[cid] = reason.strip()
        if verdict == "noise":
            noise[cid] = reason.strip()
    return noise, reasons
