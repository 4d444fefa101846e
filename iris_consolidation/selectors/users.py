"""Users, only through the user model's own API (``AUTH_USER_MODEL`` may be any model): names,
lookups, who has truths to consolidate, the truth list's user picker.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import (
    Count,
    Exists,
    Model,
    OuterRef,
)

from ..exceptions import UnknownUser
from ..models import (
    Truth,
)

UNKNOWN_USER = "No user has the id or username {value!r}. Check the value, e.g. with export_truths."


def user_name_lookup(prefix: str = "user") -> str:
    """ORM path from a model's ``prefix`` foreign key to the user's ``USERNAME_FIELD``,
    e.g. ``"user__username"``, or ``"user__email"`` for a user model keyed by email."""
    return f"{prefix}__{get_user_model().USERNAME_FIELD}"


def user_search_fields(prefix: str = "user") -> list[str]:
    """Admin search paths for a model's users: their ``USERNAME_FIELD`` and, where the
    user model has one, its email field (``get_email_field_name()``)."""
    User = get_user_model()
    names = [User.USERNAME_FIELD]
    email = User.get_email_field_name() if hasattr(User, "get_email_field_name") else None
    if email and email not in names and any(f.name == email for f in User._meta.get_fields()):
        names.append(email)
    return [f"{prefix}__{name}" for name in names]


def username_max_length() -> int | None:
    """``max_length`` of the user model's ``USERNAME_FIELD`` (150 for Django's user)."""
    User = get_user_model()
    return getattr(User._meta.get_field(User.USERNAME_FIELD), "max_length", None)


def named_users(ids: Iterable[int]) -> list[str]:
    """``"<natural key> (#<id>)"`` per id, in the given order, through ``get_username()``;
    an id no user has reads ``"#<id> (no such user)"``."""
    ids = list(ids)
    users = get_user_model()._default_manager.in_bulk(ids)
    return [f"{users[pk].get_username()} (#{pk})" if pk in users else f"#{pk} (no such user)" for pk in ids]


def get_user(*, value: str | int) -> Model:
    """The user whose primary key or natural key (``USERNAME_FIELD``) is ``value``.

    A primary key wins over a natural key of the same text. Raises ``UnknownUser``.
    """
    User = get_user_model()
    text = str(value).strip()
    try:
        pk = User._meta.pk.to_python(text)
    except (ValidationError, ValueError, TypeError):
        pk = None
    if pk is not None:
        user = User._default_manager.filter(pk=pk).first()
        if user is not None:
            return user
    try:
        return User._default_manager.get_by_natural_key(text)
    except User.DoesNotExist:
        raise UnknownUser(UNKNOWN_USER.format(value=text)) from None


def list_user_ids_to_consolidate(*, user_id: int | None, max_generation: int, min_truths: int = 2) -> list[int]:
    """Ids of users with at least ``min_truths`` consolidatable truths, ascending (or just
    ``user_id``). Two make a cluster; one is enough when a per-truth stage runs (noise,
    decay, prune: a user with a single truth still has it decayed, pruned, noise-checked)."""
    qs = Truth.objects.consolidatable(max_generation=max_generation)
    if user_id is not None:
        qs = qs.filter(user_id=user_id)
    counts = qs.values("user_id").annotate(n=Count("id")).filter(n__gte=min_truths).order_by("user_id")
    return list(counts.values_list("user_id", flat=True))


#: Most usernames the truth list's user filter suggests at once.
USER_SUGGESTIONS = 20


def list_usernames_with_truths(*, term: str, limit: int = USER_SUGGESTIONS) -> list[str]:
    """Usernames (``USERNAME_FIELD``) of users who have truths, containing ``term``
    (case-insensitive), sorted, at most ``limit`` (one query)."""
    User = get_user_model()
    field = User.USERNAME_FIELD
    users = User.objects.filter(Exists(Truth.all_objects.filter(user_id=OuterRef("pk"))))
    if term.strip():
        users = users.filter(**{f"{field}__icontains": term.strip()})
    return [str(name) for name in users.order_by(field).values_list(field, flat=True)[:limit]]


def list_allowed_usernames(*, settings: Any) -> list[str]:
    """Usernames of the live settings record's allowed users, sorted (one query)."""
    field = get_user_model().USERNAME_FIELD
    return sorted(str(n) for n in settings.allowed_users.values_list(field, flat=True))


def get_users_by_username(*, names: list[str]) -> tuple[list[Model], list[str]]:
    """The users named ``names`` (by ``USERNAME_FIELD``) and the names that match no
    user, in the order given (one query; none if ``names`` is empty)."""
    if not names:
        return [], []
    User = get_user_model()
    field = User.USERNAME_FIELD
    found = {str(getattr(u, field)): u for u in User.objects.filter(**{f"{field}__in": names})}
    return [found[n] for n in names if n in found], [n for n in names if n not in found]
