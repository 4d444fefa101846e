"""What a regular expression's every match must contain, read from the pattern itself:
the strings a scan may look for first, and skip the pattern where none occurs."""

from __future__ import annotations

import importlib
import re
from types import ModuleType
from typing import Any

_parser: ModuleType | None
_constants: ModuleType | None
try:  # ``re``'s own parser (CPython 3.11 and later; private, so typeshed has no stubs for it)
    _parser, _constants = importlib.import_module("re._parser"), importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - another Python: no literal is known, scan always
    _constants = _parser = None


def required_literals(pattern: str) -> tuple[str, ...]:
    """Strings of which every match of ``pattern`` contains at least one; () if none is
    found (or the pattern is case-insensitive). Read from the parsed pattern (``re``'s own
    parser): a run of literal characters in the pattern's sequence, or in a group, a
    repeat of at least once, or a branch whose every alternative has its own, the run
    with the longest shortest string kept. Exact by construction: each such part is
    matched by every match of the pattern, so where none of the strings occurs in a text
    the pattern cannot match there, and a scan may be skipped."""
    if _parser is None:
        return ()
    try:
        parsed = _parser.parse(pattern)
    except (AttributeError, re.error):  # a parser that changed: scan always
        return ()
    if parsed.state.flags & re.IGNORECASE:
        return ()
    return _literals_in(list(parsed), _constants)


def _literals_in(items: list[tuple[Any, Any]], c: Any) -> tuple[str, ...]:
    best: tuple[str, ...] = ()
    run = ""
    for op, av in items:
        found: tuple[str, ...] = ()
        if op is c.LITERAL:
            run += chr(av)
            found = (run,)
        else:
            run = ""
            if op is c.SUBPATTERN and not av[1] & re.IGNORECASE:
                found = _literals_in(list(av[3]), c)
            elif op is c.BRANCH:
                alternatives = [_literals_in(list(a), c) for a in av[1]]
                if all(alternatives):
                    found = tuple(dict.fromkeys(x for a in alternatives for x in a))
            elif op in (c.MAX_REPEAT, c.MIN_REPEAT) and av[0] >= 1:
                found = _literals_in(list(av[2]), c)
        if found and (not best or min(map(len, found)) > min(map(len, best))):
            best = found
    return best
