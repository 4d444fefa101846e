"""The modules of the app a ``consolidate_truths --sync`` pass crosses, in the order it first
enters each (the walk of docs/architecture.md).

    .venv/bin/python benchmarks/walk.py [--data samples/demo.truths.jsonl] [--replay samples/demo.recorded.jsonl]

It creates a scratch test database (Django's ``create_test_db``), loads the truths with
``load_truths --create-users``, then runs ``consolidate_truths --sync`` (the recorded verdicts
replayed, as ``make demo`` does) under ``sys.setprofile``: every Python function called is
counted by its module, and a module of ``iris_consolidation`` is "crossed" when one of its
functions runs (module-level code at import aside: the imports happen before the pass). It
prints the modules, the count, how many times control passed from one module to another
(calls only) and the merged and superseded truths, then drops the database. The spine is
the modules between the command and the parts: the doors, ``services/queue/``,
``services/run/`` (before it, ``pipeline/consolidation``, ``batch_plan`` and ``inventory``);
its edges are the (caller, callee) pairs of modules seen among them.

The stricter measure, the walk "from the command to a saved merged truth": at every moment a
merged truth is saved (a ``Truth`` of origin ``consolidated`` inserted while a function of
``services/pipeline/merging`` runs: Django's ``post_save``), the modules of the app on the call
stack, from the command's ``handle`` down to that save. It prints their union over every such
moment (the modules the calls pass through, not every module the pass touches), the distinct
hops between them (module A calling into module B on one of those stacks, frames of Django or
other libraries between them skipped), and the deepest stack. It runs in any tree of the
project: copy this file into another checkout's ``benchmarks/`` and run it there.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "iris_consolidation"


def _module_of(filename: str) -> str | None:
    path = Path(filename)
    try:
        relative = path.resolve().relative_to(ROOT)
    except ValueError:
        return None
    if relative.parts[0] != PACKAGE or "migrations" in relative.parts:
        return None
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="samples/demo.truths.jsonl")
    parser.add_argument("--replay", default="samples/demo.recorded.jsonl")
    args = parser.parse_args()
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ["IRIS_CONSOLIDATION_JUDGE"] = "rules"
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import setup_test_environment

    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    # A database of its own: the test suite's (``test_<name>``) may be in use.
    connection.settings_dict.setdefault("TEST", {})["NAME"] = f"iris_walk_{os.getpid()}"
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        call_command("load_truths", args.data, create_users=True, verbosity=0)
        # Import every module the pass may import, so that the trace sees calls, not imports.
        from iris_consolidation.management.commands import consolidate_truths  # noqa: F401

        first: dict[str, int] = {}
        calls: Counter[str] = Counter()
        edges: Counter[tuple[str, str]] = Counter()
        passes = [0]
        last = [None]

        def profile(frame, event, arg):  # noqa: ANN001, ANN202
            if event != "call":
                return
            module = _module_of(frame.f_code.co_filename)
            if module is None:
                return
            if frame.f_code.co_name == "<module>":
                return
            calls[module] += 1
            first.setdefault(module, len(first))
            caller = _module_of(frame.f_back.f_code.co_filename) if frame.f_back is not None else None
            if caller is not None and caller != module:
                edges[(caller, module)] += 1
            if last[0] is not None and last[0] != module:
                passes[0] += 1
            last[0] = module

        stacks = StackWalk()
        sys.setprofile(profile)
        try:
            with stacks:
                call_command("consolidate_truths", sync=True, replay=[args.replay], verbosity=0)
        finally:
            sys.setprofile(None)
        from iris_consolidation.models import Truth

        merged = Truth.all_objects.filter(retired_reason="merged").count()
        superseded = Truth.all_objects.filter(retired_reason="superseded").count()
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    ordered = sorted(first, key=first.get)
    for module in ordered:
        print(f"{first[module]:3d} {module} ({calls[module]} calls)")
    print(f"modules crossed: {len(ordered)}")
    print(f"calls into the app: {sum(calls.values())}; changes of module between consecutive app calls: {passes[0]}")
    spine = [m for m in ordered if _in_spine(m)]
    spine_edges = sorted((a, b) for a, b in edges if _in_spine(a) and _in_spine(b))
    print(f"spine: {len(spine)} modules: {', '.join(m.removeprefix(PACKAGE + '.') for m in spine)}")
    print(f"spine edges (caller -> callee): {len(spine_edges)}")
    for a, b in spine_edges:
        print(f"  {a.removeprefix(PACKAGE + '.')} -> {b.removeprefix(PACKAGE + '.')} ({edges[(a, b)]} calls)")
    print(f"sources merged: {merged}, superseded: {superseded}")
    stacks.report()


#: The run's owner before ``services/run/`` existed.
FORMER_OWNER = {f"{PACKAGE}.services.pipeline.{name}" for name in ("consolidation", "batch_plan", "inventory")}


def _in_spine(module: str) -> bool:
    """A door, ``services/queue/``, ``services/run/`` or the former owner (see the docstring)."""
    doors = (f"{PACKAGE}.tasks", f"{PACKAGE}.management.", f"{PACKAGE}.admin.", f"{PACKAGE}.api")
    return (
        module.startswith((f"{PACKAGE}.services.queue.", f"{PACKAGE}.services.run.", *doors)) or module in FORMER_OWNER
    )


MERGING = f"{PACKAGE}.services.pipeline.merging"


class StackWalk:
    """The app's modules on the call stack at each save of a merged truth (see the docstring):
    ``modules`` their union, ``hops`` the (caller, callee) pairs of consecutive modules on a
    stack, ``deepest`` the longest stack (modules in call order, consecutive repeats as one)."""

    def __init__(self) -> None:
        self.saves = 0
        self.modules: set[str] = set()
        self.hops: set[tuple[str, str]] = set()
        self.deepest: list[str] = []
        self.order: dict[str, int] = {}

    def __enter__(self) -> StackWalk:
        from django.db.models.signals import post_save

        from iris_consolidation.models import Truth

        post_save.connect(self._saved, sender=Truth, dispatch_uid="walk-stack")
        return self

    def __exit__(self, *exc: object) -> None:
        from django.db.models.signals import post_save

        from iris_consolidation.models import Truth

        post_save.disconnect(sender=Truth, dispatch_uid="walk-stack")

    def _saved(self, sender: object, instance: object, created: bool = False, **kwargs: object) -> None:
        if not created or getattr(instance, "origin", "") != "consolidated":
            return
        frame = sys._getframe(1)
        stack: list[str] = []
        while frame is not None:
            module = _module_of(frame.f_code.co_filename)
            if module is not None and (not stack or stack[-1] != module):
                stack.append(module)
            frame = frame.f_back
        stack.reverse()  # from the command down to the save
        if MERGING not in stack:
            return
        self.saves += 1
        for module in stack:
            self.order.setdefault(module, len(self.order))
        self.modules.update(stack)
        self.hops.update(zip(stack, stack[1:], strict=False))
        if len(stack) > len(self.deepest):
            self.deepest = stack

    def report(self) -> None:
        short = [m.removeprefix(PACKAGE + ".") for m in sorted(self.modules, key=self.order.get)]
        print(f"merged truths saved by merging: {self.saves}")
        print(f"modules on the stack to a saved merged truth: {len(short)}: {', '.join(short)}")
        print(f"hops between them (caller -> callee): {len(self.hops)}")
        for a, b in sorted(self.hops, key=lambda h: (self.order[h[0]], self.order[h[1]])):
            print(f"  {a.removeprefix(PACKAGE + '.')} -> {b.removeprefix(PACKAGE + '.')}")
        deepest = " -> ".join(m.removeprefix(PACKAGE + ".") for m in self.deepest)
        print(f"deepest stack: {len(self.deepest)} modules: {deepest}")


if __name__ == "__main__":
    main()
