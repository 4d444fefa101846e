"""What is in force for a run: the stages' modes, the live settings over the Django
settings, the threshold's range, and the values a run stored when it was made.

The stages of a pass and their modes (``off``, ``report``, ``apply``): the defaults come
from ``IRIS_CONSOLIDATION_MINE`` ... ``_PRUNE``, the live settings override them, and
``consolidate_truths --only`` narrows them (``services/hygiene/stages.py`` runs them).

Live settings: the admin-editable record that overrides the Django settings' defaults.
``get_effective_settings()`` reads the singleton ``LiveSettings`` row on every call
(no cache), so an edit in the admin takes effect on the next run without a restart;
an empty field falls back to the Django setting (``conf.py``). A run stores what was
in force when it was created (``ConsolidationRun.effective_settings``) and reads
its threshold, allowlist, retirement cap, prune cap, cost cap and stage modes from there
(``retirement_cap``, ``prune_share``, ``allowed_user_ids``, ``max_cost``, ``run_modes``), so one run
never mixes two configurations. The schedule (``scheduling.start_scheduled_run``)
reads ``enabled``, the interval and "scheduled passes dry-run only" from here.

Reads only; every layer that needs these values imports this module.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured

from .conf import app_settings
from .exceptions import InvalidInput, InvalidThreshold
from .models import ConsolidationRun, LiveSettings, StageMode

BAD_THRESHOLD = "The threshold must be a number in (0, 1], e.g. 0.75; got {value!r}."
BAD_PRUNE_SHARE = "IRIS_CONSOLIDATION_MAX_PRUNE_SHARE must be a number from 0 to 1, e.g. 0.1 for 10%; got {value!r}."


def validate_threshold(value: Any) -> float:
    """``value`` as a float in (0, 1], the range of a cosine similarity threshold; raises
    ``InvalidThreshold`` (message ``BAD_THRESHOLD``) otherwise. The one check of the
    range: the command, the system checks and the live settings' form use it."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidThreshold(BAD_THRESHOLD.format(value=value)) from None
    if not (0.0 < number <= 1.0):
        raise InvalidThreshold(BAD_THRESHOLD.format(value=value))
    return number


#: Every stage, in pass order.
STAGES = ("mine", "noise", "decay", "lexical", "semantic", "relocate", "promote", "prune")
#: Stages that work truth by truth: a user with a single consolidatable truth needs them too.
PER_TRUTH = ("noise", "decay", "prune")
#: The setting of each stage's default mode.
SETTING_OF = {
    "mine": "MINE", "noise": "NOISE", "decay": "DECAY", "lexical": "LEXICAL", "semantic": "SEMANTIC",
    "relocate": "RELOCATE", "promote": "PROMOTE", "prune": "PRUNE",
}
MODES = tuple(StageMode.values)

UNKNOWN_STAGE = "Unknown stage {names}; the stages are: {stages}."
BAD_MODE = "IRIS_CONSOLIDATION_{setting} must be one of {modes}; got {value!r}."


def parse_only(value: str | Iterable[str] | None) -> tuple[str, ...] | None:
    """The stages named by ``--only`` ("noise,decay" or a list), in pass order; None for all.

    Raises ``InvalidInput`` with one line listing the stages for an unknown or empty name.
    """
    if value is None:
        return None
    names = [n.strip().lower() for n in (value.split(",") if isinstance(value, str) else value)]
    unknown = [n for n in names if n not in STAGES]
    if unknown or not names:
        shown = ", ".join(repr(n) for n in unknown) if unknown else "''"
        raise InvalidInput(UNKNOWN_STAGE.format(names=shown, stages=", ".join(STAGES)))
    return tuple(s for s in STAGES if s in names)


def default_modes(live: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each stage's mode: the live settings' (where set), else the Django setting's.

    Raises ``ImproperlyConfigured`` for a setting that is not off, report or apply.
    """
    modes = {}
    for stage, setting in SETTING_OF.items():
        value = (live or {}).get(stage) or getattr(app_settings, setting)
        value = str(value).strip().lower()
        if value not in MODES:
            raise ImproperlyConfigured(BAD_MODE.format(setting=setting, modes=", ".join(MODES), value=value))
        modes[stage] = value
    return modes


def narrow(modes: Mapping[str, str], only: tuple[str, ...] | None) -> dict[str, str]:
    """``modes`` with every stage not in ``only`` turned off (``only`` None: unchanged).

    A stage named in ``only`` whose mode is off runs in report mode: naming it asks for it.
    """
    if only is None:
        return dict(modes)
    return {s: (modes[s] if modes[s] != StageMode.OFF else StageMode.REPORT) if s in only else StageMode.OFF
            for s in STAGES}


def run_modes(run: ConsolidationRun) -> dict[str, str]:
    """The modes in force for ``run``: stored on it, dry runs never ``apply``."""
    stored = (run.effective_settings or {}).get("stage_modes") or default_modes()
    modes = {s: stored.get(s, StageMode.OFF) for s in STAGES}
    if run.dry_run:
        modes = {s: (StageMode.REPORT if m == StageMode.APPLY and s not in ("lexical", "semantic") else m)
                 for s, m in modes.items()}
    return modes


def per_truth_stages_on(run: ConsolidationRun) -> bool:
    """Whether a stage of ``PER_TRUTH`` is on (report or apply) for ``run``."""
    modes = run_modes(run)
    return any(modes[s] != StageMode.OFF for s in PER_TRUTH)


@dataclass(frozen=True, kw_only=True)
class EffectiveSettings:
    """The values in force: the live record's where set, else the Django settings'.

    ``allowed_user_ids`` empty means every user; ``interval_hours`` 0 means every slot
    of the schedule's cron runs. ``overridden`` names the fields the live record sets.
    """

    enabled: bool
    interval_hours: int
    scheduled_dry_run_only: bool
    allowed_user_ids: tuple[int, ...]
    max_retirements_per_run: int
    similarity_threshold: float
    max_cost_per_run: float | None = None
    #: Most of a user's live truths one pass may prune (``prune_share``).
    max_prune_share: float = 0.1
    overridden: tuple[str, ...] = ()
    #: Mode of each stage of a pass (``services/hygiene/stages.py``): off, report or apply.
    stage_modes: dict[str, str] = field(default_factory=dict)
    #: What a model's action with signals gets (``choices.RiskPolicy``).
    risk_policy: str = "verify"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, stored on the run."""
        data = asdict(self)
        data["allowed_user_ids"] = list(self.allowed_user_ids)
        data["overridden"] = list(self.overridden)
        return data


def _allowlist_ids(values: Any) -> tuple[int, ...]:
    """Ids of the users named (by id or natural key, the user model's ``USERNAME_FIELD``)
    in the ``USER_ALLOWLIST`` setting."""
    names = [str(v).strip() for v in values or () if str(v).strip()]
    if not names:
        return ()
    User = get_user_model()
    ids = {int(n) for n in names if n.isdigit()}
    ids |= set(User._default_manager.filter(**{f"{User.USERNAME_FIELD}__in": names}).values_list("pk", flat=True))
    if not ids:
        # An allowlist naming nobody who exists must not widen to "everyone".
        return (-1,)
    return tuple(sorted(ids))


def _cost(value: Any) -> float | None:
    """A cap in USD as a float (the live record holds a Decimal); None or "" for no cap."""
    if value is None or value == "":
        return None
    return float(value)


def get_effective_settings() -> EffectiveSettings:
    """Read the live record (two queries) and merge it over the Django settings."""
    row = LiveSettings.objects.filter(pk=LiveSettings.SINGLETON_ID).first()
    values: dict[str, Any] = {
        "enabled": bool(app_settings.ENABLED),
        "interval_hours": int(app_settings.SCHEDULE_INTERVAL_HOURS),
        "scheduled_dry_run_only": bool(app_settings.SCHEDULED_DRY_RUN_ONLY),
        "allowed_user_ids": _allowlist_ids(app_settings.USER_ALLOWLIST),
        "max_retirements_per_run": int(app_settings.MAX_RETIREMENTS_PER_RUN),
        "similarity_threshold": float(app_settings.SIMILARITY_THRESHOLD),
        "max_cost_per_run": _cost(app_settings.MAX_COST_PER_RUN),
        "max_prune_share": validate_prune_share(app_settings.MAX_PRUNE_SHARE),
        "risk_policy": str(app_settings.RISK_POLICY),
    }
    overridden: list[str] = []
    if row is not None:
        for name in (
            "enabled",
            "interval_hours",
            "scheduled_dry_run_only",
            "max_retirements_per_run",
            "similarity_threshold",
            "max_cost_per_run",
            "max_prune_share",
        ):
            value = getattr(row, name)
            if value is not None:
                values[name] = _cost(value) if name == "max_cost_per_run" else value
                overridden.append(name)
        if row.risk_policy:
            values["risk_policy"] = row.risk_policy
            overridden.append("risk_policy")
        allowed = tuple(sorted(row.allowed_users.values_list("pk", flat=True)))
        if allowed:
            values["allowed_user_ids"] = allowed
            overridden.append("allowed_users")
    live_modes = {}
    for stage in STAGES:
        value = getattr(row, f"{stage}_mode", "") if row is not None else ""
        if value:
            live_modes[stage] = value
            overridden.append(f"{stage}_mode")
    return EffectiveSettings(
        **values, overridden=tuple(overridden), stage_modes=default_modes(live_modes)
    )


def retirement_cap(run: ConsolidationRun) -> int:
    """The run's cap on retirements: from its stored settings, else the Django setting."""
    value = (run.effective_settings or {}).get("max_retirements_per_run")
    return int(value) if value is not None else int(app_settings.MAX_RETIREMENTS_PER_RUN)


def validate_prune_share(value: Any) -> float:
    """``value`` as a float in [0, 1] (a share of a user's live truths); raises
    ``ImproperlyConfigured`` (message ``BAD_PRUNE_SHARE``) otherwise."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ImproperlyConfigured(BAD_PRUNE_SHARE.format(value=value)) from None
    if not 0.0 <= number <= 1.0:
        raise ImproperlyConfigured(BAD_PRUNE_SHARE.format(value=value))
    return number


def prune_share(run: ConsolidationRun) -> float:
    """The run's prune cap, a share of each user's live truths: from its stored settings,
    else the Django setting (``MAX_PRUNE_SHARE``; a run made before the cap existed takes it)."""
    value = (run.effective_settings or {}).get("max_prune_share")
    return validate_prune_share(value if value is not None else app_settings.MAX_PRUNE_SHARE)


def prune_allowance(*, share: float, live: int) -> int:
    """How many of ``live`` truths a pass may prune under ``share``: ``floor(share x live)``
    (at most the share, never rounded up; a tiny epsilon keeps 0.1 x 30 at 3, not 2)."""
    return max(0, math.floor(share * live + 1e-9))


def allowed_user_ids(run: ConsolidationRun) -> tuple[int, ...]:
    """Users the run may cover (empty: everyone), from its stored settings."""
    return tuple((run.effective_settings or {}).get("allowed_user_ids") or ())


def risk_policy(run: ConsolidationRun) -> str:
    """The run's risk policy (``choices.RiskPolicy``): from its stored settings, else the
    Django setting (``RISK_POLICY``)."""
    return str((run.effective_settings or {}).get("risk_policy") or app_settings.RISK_POLICY)


def max_cost(run: ConsolidationRun) -> float | None:
    """The run's cap on judge spend in USD (None: no cap), from its stored settings,
    else the Django setting (``MAX_COST_PER_RUN``)."""
    stored = run.effective_settings or {}
    if "max_cost_per_run" in stored:
        return _cost(stored["max_cost_per_run"])
    return _cost(app_settings.MAX_COST_PER_RUN)
