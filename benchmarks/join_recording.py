"""Join a model answerer's replies to the requests they answer, as one recording file.

    .venv/bin/python benchmarks/join_recording.py --set demo --model "Claude (Anthropic), replies of 7 December 2026" \
        OUT.jsonl NAME.replies.jsonl [NAME2.replies.jsonl ...]

Each ``NAME.replies.jsonl`` (``{"id", "reply"}`` lines) is read with the ``NAME.requests.jsonl``
beside it (``{"id", "messages"}``, as ``eval_judge --unanswered`` writes it). Each line of OUT is
a recording row in the format of ``samples/demo.recorded.jsonl``: ``set``, ``contract``
(``judge`` for a ``<truths>`` call, ``second_look`` for a ``<checks>`` one), ``prompt_version``
(this tree's, by contract), ``model``, ``key`` (the request id), ``messages`` and ``reply``.
Raises ``SystemExit`` naming a reply whose request is missing or a call of another contract.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from iris_consolidation.llm import prompts, second_look  # noqa: E402

VERSIONS = {"judge": prompts.PROMPT_VERSION, "second_look": second_look.PROMPT_VERSION}


def _contract(messages: list[dict]) -> str:
    content = str(messages[-1]["content"])
    return "judge" if "<truths>" in content else "second_look" if "<checks>" in content else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("out", help="the recording file to write")
    parser.add_argument(
        "replies", nargs="+", help="NAME.replies.jsonl files, each read with the NAME.requests.jsonl beside it"
    )
    args = parser.parse_args()
    rows = []
    for path in map(Path, args.replies):
        if not path.name.endswith(".replies.jsonl"):
            raise SystemExit(f"{path}: a replies file is named NAME.replies.jsonl")
        requests_path = path.with_name(path.name.replace(".replies.jsonl", ".requests.jsonl"))
        if not path.is_file() or not requests_path.is_file():
            raise SystemExit(f"{path}: needs itself and {requests_path} beside it; one of them is missing")
        requests = {r["id"]: r["messages"] for r in map(json.loads, requests_path.read_text().splitlines())}
        for reply in map(json.loads, path.read_text().splitlines()):
            messages = requests.get(reply["id"])
            if messages is None:
                raise SystemExit(f"{path}: no request {reply['id']} in {requests_path}")
            contract = _contract(messages)
            if not contract:
                raise SystemExit(f"{path}: {reply['id']} is neither a judge call nor a second look")
            rows.append({"set": args.set, "contract": contract, "prompt_version": VERSIONS[contract],
                         "model": args.model, "key": reply["id"], "messages": messages, "reply": reply["reply"]})
    Path(args.out).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"{len(rows)} calls -> {args.out}")


if __name__ == "__main__":
    main()
