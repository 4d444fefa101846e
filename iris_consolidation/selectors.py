"""Reads that span models: users to consolidate, run summaries, lineage.

Selectors return querysets, ids or small frozen dataclasses; they never write.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Model

from .exceptions import UnknownUser
from .models import Truth

UNKNOWN_USER = "No user has the id or username {value!r}. Check the value, e.g. with export_truths."


def get_user(*, value: str | int) -> Model:
    """The user whose primary key or username is ``value``; raises ``UnknownUser``."""
    User = get_user_model()
    text = str(value).strip()
    if text.isdigit():
        user = User.objects.filter(pk=int(text)).first()
        if user is not None:
            return user
    user = User.objects.filter(**{User.USERNAME_FIELD: text}).first()
    if user is None:
        raise UnknownUser(UNKNOWN_USER.format(value=text))
    return user


def list_user_ids_to_consolidate(*, user_id: int | None, max_generation: int) -> list[int]:
    """Ids of users with at least two consolidatable truths, ascending (or just ``user_id``)."""
    qs = Truth.objects.consolidatable(max_generation=max_generation)
    if user_id is not None:
        qs = qs.filter(user_id=user_id)
    from django.db.models import Count

    return list(
        qs.values("user_id").annotate(n=Count("id")).filter(n__gte=2).order_by("user_id").values_list("user_id", flat=True)
    )
