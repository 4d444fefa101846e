"""Stages whose model calls are withheld for a block of code: inside it they run as they
do without a model (mining with the offline extractor, noise and relocation by their rules
alone, promotion "skipped: no LLM"), whatever the run's judge.

The one user is the replay of a recording (``evaluation.replay.replaying``): a stage whose
calls the recording does not hold has no recorded answer to give, and an invented one (an
empty reply) would read as a broken model, or worse, be remembered as the model's answer.
Not here: which stages call a model (``stages.REGISTRY``) or how they behave offline.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator

_WITHHELD: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("iris_withheld_stages", default=frozenset())


@contextlib.contextmanager
def withholding(stages: Iterable[str]) -> Iterator[frozenset[str]]:
    """Inside: the model calls of ``stages`` (stage names: mine, noise, relocate, promote)
    are withheld in this context (``is_withheld``); yields the names. Nests: an inner
    block withholds its stages as well as the outer block's."""
    names = _WITHHELD.get() | frozenset(stages)
    token = _WITHHELD.set(names)
    try:
        yield names
    finally:
        _WITHHELD.reset(token)


def is_withheld(stage: str) -> bool:
    """Whether ``stage``'s model calls are withheld here (``withholding``)."""
    return stage in _WITHHELD.get()
