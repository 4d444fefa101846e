"""Exceptions raised by the app's services; interfaces translate them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from .llm.base import Spend


class IrisConsolidationError(Exception):
    """Base class of every error this app raises on purpose."""


class InvalidInput(IrisConsolidationError):
    """Input from an operator (user id, threshold, file) is not acceptable."""


class UnknownUser(InvalidInput):
    """No user has the given id or username."""


class InvalidThreshold(InvalidInput):
    """A similarity threshold outside (0, 1]."""


class ImportFileInvalid(InvalidInput):
    """A truths file failed validation; nothing was imported."""


class EmbeddingError(IrisConsolidationError):
    """The embedding model failed or returned vectors of the wrong shape."""


class EmbeddingDimensionMismatch(EmbeddingError):
    """An embedding does not have ``EMBEDDING_DIMENSIONS`` dimensions."""


class ModelCallError(IrisConsolidationError):
    """A model call that gave no usable reply. ``spend`` is what the calls made for it
    cost (every attempt, a failed one included; None when no call was made); the LLM
    client sets it before raising, so callers add it to the run (``add_spend``)."""

    spend: Spend | None = None

    @property
    def llm_calls(self) -> int:
        """Model calls made for this error (at least one: the call that failed)."""
        return max(1, self.spend.calls) if self.spend is not None else 1


class JudgeUnavailable(ModelCallError):
    """The judge could not be reached (transport, auth, quota, timeout)."""


class JudgeRateLimited(JudgeUnavailable):
    """The provider answered 429; ``retry_after`` holds the wait in seconds."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class JudgeResponseInvalid(ModelCallError):
    """The judge replied with text that is not a valid verdict; ``raw`` keeps it."""

    def __init__(self, message: str, *, raw: str = "") -> None:
        super().__init__(message)
        self.raw = raw


class StaleClusterError(IrisConsolidationError):
    """A cluster member changed since it was judged."""


class JudgeMisconfigured(ImproperlyConfigured):
    """The judge settings cannot work (unknown judge, missing API key)."""


class UndoRefused(IrisConsolidationError):
    """An undo that cannot be done as asked; nothing was changed."""

    #: The refusal of an undo given no reason (of a merge, a supersede or a relocation).
    REASON_REQUIRED = "Give a reason for the undo; it is kept in the truth's lineage."


class ConsolidatedFurther(UndoRefused):
    """The truth to undo was itself consolidated later; ``later_truth_id`` names the step to undo first."""

    def __init__(self, message: str, *, later_truth_id: int) -> None:
        super().__init__(message)
        self.later_truth_id = later_truth_id


class CancelRefused(IrisConsolidationError):
    """A run that cannot be cancelled (finished, or some of its work has started); nothing was changed."""


class RetryRefused(IrisConsolidationError):
    """A run whose jobs cannot be retried (a cancelled run: nothing of it failed); nothing was changed."""


class ApplyRefused(IrisConsolidationError):
    """A dry run whose verdicts cannot be applied (not a dry run, unfinished, already applied, empty)."""


class StoredDecisionInvalid(IrisConsolidationError):
    """A review's stored decision (``ClusterReview.decision``) is of another format or malformed."""


class InvalidWindow(InvalidInput):
    """A ``--since`` value that is not ``last``, an ISO 8601 time or a duration."""


class LaunchFailed(IrisConsolidationError):
    """An operator's run that could not start, or stopped (``services/queue/launch``).

    ``code`` says why: ``not_started`` (bad input or configuration; nothing written),
    ``embedding`` (phase 1 could not embed; the run is marked failed) or ``interrupted``
    (Ctrl-C; the run is marked failed). ``exit_code`` is the process status for it.
    """

    NOT_STARTED = "not_started"
    EMBEDDING = "embedding"
    INTERRUPTED = "interrupted"

    #: The exit status of each code; 1 for any other.
    EXIT_CODES = {INTERRUPTED: 130}

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code

    @property
    def exit_code(self) -> int:
        return self.EXIT_CODES.get(self.code, 1)
