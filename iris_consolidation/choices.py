"""Every choice the app stores (origins, statuses, outcomes, modes, kinds) and the one
protection rule, in one module that imports nothing of the app: ``models`` and
``querysets`` both read it, so neither imports the other for a value.

The models keep their familiar names as aliases (``ConsolidationRun.Status`` is
``RunStatus``); new code may use either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.db import models
from django.db.models import Q

#: Names of the django-q2 schedules this app owns (``scheduling.ensure_schedules``).
WEEKLY_SCHEDULE = "iris_consolidation:weekly"
RECOVERY_SCHEDULE = "iris_consolidation:recover"


class Origin(models.TextChoices):
    PROMOTED = "promoted", "Promoted from memories"
    USER = "user", "Created by the user"
    AGENT = "agent", "Created by the assistant"
    CONSOLIDATED = "consolidated", "Made by consolidation"


#: Origins whose truths consolidation may retire or reword.
CONSOLIDATABLE_ORIGINS = (Origin.PROMOTED, Origin.CONSOLIDATED)


class RetiredReason(models.TextChoices):
    MERGED = "merged", "Merged into another truth"
    SUPERSEDED = "superseded", "Superseded by a later truth"
    UNDONE = "undone", "Consolidation undone"
    NOISE = "noise", "Noise: should never have been stored"
    PRUNED = "pruned", "Pruned: relevance or quality below the floor"
    RELOCATED = "relocated", "Relocated to a note (a pointer truth replaces it)"


class RiskPolicy(models.TextChoices):
    """What a model's action gets when it passes every invariant but raises a signal
    (``IRIS_CONSOLIDATION_RISK_POLICY``, the live settings' ``risk_policy``)."""

    VERIFY = "verify", "Ask the model a second look; apply what it confirms"
    REFUSE = "refuse", "Refuse it (as the rule judge does)"
    ACCEPT = "accept", "Apply it; record the signals only"


def is_protected(*, pinned: bool, origin: str, generation: int, max_generation: int) -> bool:
    """Whether consolidation must never retire or reword a truth:
    pinned, of an origin other than promoted/consolidated, or at ``max_generation``.

    The one rule: ``Truth.is_protected``, ``TruthQuerySet.protected`` (as ``protected_q``),
    the judge's request, merging's re-check under lock and the evaluation all use it.
    """
    return bool(pinned) or origin not in CONSOLIDATABLE_ORIGINS or int(generation) >= max_generation


@dataclass(frozen=True)
class MergeProtection:
    """What protection means for one merge, given its members'
    aliases and which of them are protected: the one statement of these consequences.

    - ``keeper``: a protected member survives the merge as its result, never reworded
      (the merge takes its text); None when no member is protected;
    - ``allowed``: at most one protected member per merge (two cannot both survive);
    - ``retiring``: the members the merge retires (all but the protected ones);
    - ``needs_embedding``: the merge makes a new truth, which needs a fresh embedding
      (not when a protected keeper is the result).
    """

    members: tuple[str, ...]
    protected: tuple[str, ...]

    @classmethod
    def of(cls, members: Iterable[str], is_protected: Callable[[str], bool]) -> MergeProtection:
        """The protection of a merge of ``members`` (aliases, in the merge's order)."""
        members = tuple(members)
        return cls(members=members, protected=tuple(a for a in members if is_protected(a)))

    @classmethod
    def of_members(cls, members: Iterable[Any]) -> MergeProtection:
        """The protection of a merge of ``members``: objects with ``alias`` and
        ``protected`` (``llm.base.MemberView``), in the merge's order."""
        members = tuple(members)
        return cls(members=tuple(m.alias for m in members), protected=tuple(m.alias for m in members if m.protected))

    @property
    def keeper(self) -> str | None:
        return self.protected[0] if self.protected else None

    @property
    def allowed(self) -> bool:
        return len(self.protected) <= 1

    @property
    def retiring(self) -> tuple[str, ...]:
        return tuple(a for a in self.members if a not in self.protected)

    @property
    def needs_embedding(self) -> bool:
        return not self.protected


def protected_q(*, max_generation: int) -> Q:
    """``is_protected`` as a filter over truths."""
    return Q(pinned=True) | ~Q(origin__in=CONSOLIDATABLE_ORIGINS) | Q(generation__gte=max_generation)


#: An LLM judge's name is this prefix and its litellm model, e.g. "llm:openai/gpt-4o-mini";
#: the rule judge's is "rules". Runs and reviews store the name (``judge``) for people;
#: code reads a run's ``judge_kind`` and ``judge_model`` (``judge_identity``).
LLM_JUDGE_PREFIX = "llm:"


class JudgeKind(models.TextChoices):
    """What kind of judge a run was made with: whether its stages may ask a model."""

    RULES = "rules", "Rule judge"
    LLM = "llm", "LLM judge"
    OTHER = "", "Another judge, or none"


#: The litellm model name of a judge answered by recorded replies (``evaluation.replay``).
REPLAY_MODEL = "openai/recorded-replay"


def llm_judge_name(model: str) -> str:
    """The stored name of the LLM judge that calls ``model``."""
    return f"{LLM_JUDGE_PREFIX}{model}"


def judge_identity(name: str | None) -> tuple[JudgeKind, str]:
    """``(kind, model)`` of the judge named ``name``: ``(LLM, its litellm model)``,
    ``(RULES, "")``, or ``(OTHER, "")`` for any other name or none. The one reading of a
    judge's name: ``lifecycle.create_run`` stores its answer on the run."""
    name = name or ""
    if name.startswith(LLM_JUDGE_PREFIX):
        return JudgeKind.LLM, name.removeprefix(LLM_JUDGE_PREFIX)
    return (JudgeKind.RULES if name == JudgeKind.RULES else JudgeKind.OTHER), ""


class RunTrigger(models.TextChoices):
    COMMAND = "command", "Command"
    SCHEDULE = "schedule", "Schedule"
    ADMIN = "admin", "Admin"


class RunExecution(models.TextChoices):
    """How the run's jobs are executed: by django-q2 workers, or in the process that
    started the run (``services/queue/execution.run_sync``), the same jobs either way.
    Whether the run writes is apart from this: ``ConsolidationRun.dry_run``."""

    QUEUED = "queued", "Queued (workers)"
    IN_PROCESS = "in_process", "In process"


class RunStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    PARTIAL = "partial", "Partial (some clusters failed)"
    FAILED = "failed", "Failed"
    #: Cancelled by an operator before any worker took a job: nothing was applied, nothing to retry.
    CANCELLED = "cancelled", "Cancelled"


class ReviewOutcome(models.TextChoices):
    APPLIED = "applied", "Applied"
    PREVIEW = "preview", "Dry run (not applied)"
    KEPT = "kept", "Kept (no action)"
    REJECTED = "rejected", "Rejected by the validator"
    STALE = "stale", "Stale member"
    FAILED = "failed", "Judge failed"
    DEFERRED = "deferred", "Deferred (budget spent)"


class ReviewFailure(models.TextChoices):
    """Why a review failed (blank: it did not). Code reads this, never ``error``'s wording."""

    NONE = "", "-"
    UNAVAILABLE = "unavailable", "Model unreachable (transport, auth, quota)"
    LLM_STOPPED = "llm_stopped", "Model stopped for this user earlier in the run"
    INVALID_REPLY = "invalid_reply", "Reply not a verdict"
    RATE_LIMITED = "rate_limited", "Rate limited past the retry window"
    JOB_FAULT = "job_fault", "Job failed (timeout, lost worker, abandoned)"


class LineageAction(models.TextChoices):
    MERGE = "merge", "Merge"
    SUPERSEDE = "supersede", "Supersede"
    UNDO = "undo", "Undo"
    RELOCATE = "relocate", "Relocate to a note"


class ChangeAction(models.TextChoices):
    CREATED = "created", "Created"
    RETIRED = "retired", "Retired"
    RESTORED = "restored", "Restored"
    UNDONE = "undone", "Undone"


class JobKind(models.TextChoices):
    USER = "user", "Phase 1 (user)"
    CLUSTER = "cluster", "Phase 2 (cluster)"
    APPLY = "apply", "Phase 2 (apply a dry run's verdict)"


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    WAITING = "waiting", "Waiting (rate limited)"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class StageMode(models.TextChoices):
    """What a stage of the pass does: nothing, list what it would do, or do it."""

    OFF = "off", "Off"
    REPORT = "report", "Report only"
    APPLY = "apply", "Apply"


class MessageRole(models.TextChoices):
    """Who wrote a session message: the session's own user, or anyone else (context)."""

    USER = "user", "The user"
    OTHER = "other", "Someone else"
