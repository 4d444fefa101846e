"""Judges: the protocol (``base``), the offline rule judge (``rules``) and the LLM
judge (``litellm_client``, the only module that imports litellm).

``get_judge_client()`` builds the judge named by ``IRIS_CONSOLIDATION_JUDGE``.
"""

from __future__ import annotations

import functools

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from ..conf import app_settings
from ..exceptions import JudgeMisconfigured
from .base import JudgeClient

UNKNOWN_JUDGE = "Unknown judge {name!r}: set IRIS_CONSOLIDATION_JUDGE to one of {choices}."


@functools.cache
def get_judge_client(name: str | None = None) -> JudgeClient:
    """The judge named ``name`` (default: ``IRIS_CONSOLIDATION_JUDGE``), cached.

    Raises ``JudgeMisconfigured`` for an unknown name or a judge that cannot work
    with the current settings (e.g. a missing API key).
    """
    name = name or app_settings.JUDGE
    paths = app_settings.JUDGE_CLIENTS
    if name not in paths:
        raise JudgeMisconfigured(UNKNOWN_JUDGE.format(name=name, choices=", ".join(sorted(paths))))
    cls = import_string(paths[name])
    return cls.from_settings()


@receiver(setting_changed)
def _clear_judge(*, setting: str, **kwargs: object) -> None:
    if setting.startswith("IRIS_CONSOLIDATION_"):
        get_judge_client.cache_clear()
