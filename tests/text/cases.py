"""One row of a language's table: a function of ``iris_consolidation.text``, its
arguments, and what it must return."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from iris_consolidation import text


def case(function: str | Callable[..., Any], *args: Any, expect: Any, **kwargs: Any) -> Any:
    """A pytest param calling ``text.<function>(*args, **kwargs)`` (or ``function`` itself
    when it is a callable), expected to equal ``expect``."""
    name = function if isinstance(function, str) else function.__name__
    shown = ", ".join(repr(a)[:40] for a in args)
    return pytest.param(function, args, kwargs, expect, id=f"{name}({shown})")


def uncovered(run: str, haystack: str) -> list[str]:
    """``text.uncovered`` of two texts, each normalised first (as the validator calls it)."""
    return text.uncovered(text.normalise(run), text.normalise(haystack))


def check(function: str | Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], expect: Any) -> None:
    """Assert one row (booleans by identity, so that a truthy value is no pass)."""
    call = getattr(text, function) if isinstance(function, str) else function
    got = call(*args, **kwargs)
    if isinstance(expect, bool):
        assert got is expect
    else:
        assert got == expect
