"""Live settings: the admin-editable record that overrides the Django settings' defaults.

``get_effective_settings()`` reads the singleton ``LiveSettings`` row on every call
(no cache), so an edit in the admin takes effect on the next run without a restart;
an empty field falls back to the Django setting (``conf.py``). A run stores what was
in force when it was created (``ConsolidationRun.effective_settings``) and reads
its threshold, allowlist and retirement cap from there, so one run never mixes two
configurations. The schedule (``scheduling.start_scheduled_run``) reads ``enabled``,
the interval and "scheduled passes dry-run only" from here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from django.contrib.auth import get_user_model

from ...conf import app_settings
from ...models import ConsolidationRun, LiveSettings
from ..hygiene import stages


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
    for stage in stages.STAGES:
        value = getattr(row, f"{stage}_mode", "") if row is not None else ""
        if value:
            live_modes[stage] = value
            overridden.append(f"{stage}_mode")
    return EffectiveSettings(
        **values, overridden=tuple(overridden), stage_modes=stages.default_modes(live_modes)
    )


def retirement_cap(run: ConsolidationRun) -> int:
    """The run's cap on retirements: from its stored settings, else the Django setting."""
    value = (run.effective_settings or {}).get("max_retirements_per_run")
    return int(value) if value is not None else int(app_settings.MAX_RETIREMENTS_PER_RUN)


def allowed_user_ids(run: ConsolidationRun) -> tuple[int, ...]:
    """Users the run may cover (empty: everyone), from its stored settings."""
    return tuple((run.effective_settings or {}).get("allowed_user_ids") or ())


def max_cost(run: ConsolidationRun) -> float | None:
    """The run's cap on judge spend in USD (None: no cap), from its stored settings,
    else the Django setting (``MAX_COST_PER_RUN``)."""
    stored = run.effective_settings or {}
    if "max_cost_per_run" in stored:
        return _cost(stored["max_cost_per_run"])
    return _cost(app_settings.MAX_COST_PER_RUN)


def risk_policy(run: ConsolidationRun) -> str:
    """The run's risk policy (``choices.RiskPolicy``): from its stored settings, else the
    Django setting (``RISK_POLICY``)."""
    return str((run.effective_settings or {}).get("risk_policy") or app_settings.RISK_POLICY)
