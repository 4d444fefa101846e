"""Users are found and named only through the user model's own API (USERNAME_FIELD,
get_by_natural_key, get_username): selectors that the commands, imports and the admin share.
A user model keyed by email is exercised end to end by tests/packaging/test_wheel.py."""

from __future__ import annotations

from typing import Any

import pytest

from iris_consolidation import selectors
from iris_consolidation.exceptions import UnknownUser

pytestmark = pytest.mark.django_db


def test_lookup_paths_follow_username_field() -> None:
    assert selectors.user_name_lookup() == "user__username"
    assert selectors.user_name_lookup("allowed_users") == "allowed_users__username"
    assert selectors.user_search_fields() == ["user__username", "user__email"]
    assert selectors.username_max_length() == 150


def test_get_user_by_id_then_by_natural_key(user_factory: Any) -> None:
    ana = user_factory("ana")
    numeric = user_factory(str(ana.pk + 1000))

    assert selectors.get_user(value="ana") == ana
    assert selectors.get_user(value=f" {ana.pk} ") == ana
    assert selectors.get_user(value=ana.pk) == ana
    # A name made of digits that is no user's id is still found by name.
    assert selectors.get_user(value=str(ana.pk + 1000)) == numeric
    with pytest.raises(UnknownUser) as info:
        selectors.get_user(value="nobody")
    assert str(info.value) == selectors.UNKNOWN_USER.format(value="nobody")


def test_named_users_keeps_order_and_names_missing_ids(user_factory: Any) -> None:
    ana, ben = user_factory("ana"), user_factory("ben")

    assert selectors.named_users([ben.pk, ana.pk, 987654]) == [
        f"ben (#{ben.pk})",
        f"ana (#{ana.pk})",
        "#987654 (no such user)",
    ]
    assert selectors.named_users([]) == []
