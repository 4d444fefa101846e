"""Fixtures of the admin tests: staff clients with chosen permissions, small lineages."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission

from tests import lineage_builder as lb


@pytest.fixture
def staff_client(client: Any, user_factory: Any) -> Any:
    """``staff_client("view_truth", ...)``: the test client logged in as staff with those
    permissions of this app (and nothing else)."""

    def make(*codenames: str, username: str = "operator") -> Any:
        user = user_factory(username, is_staff=True)
        for codename in codenames:
            user.user_permissions.add(
                Permission.objects.get(codename=codename, content_type__app_label="iris_consolidation")
            )
        client.force_login(user)
        return client

    return make


@pytest.fixture
def two_step_lineage(user_factory: Any) -> dict[str, Any]:
    """a + b -> ab (generation 1), ab + c -> abc (generation 2), in two runs."""
    user = user_factory("alice")
    a, b, c = lb.originals(user, 3)
    first, second = lb.new_run(user_id=user.pk), lb.new_run(user_id=user.pk)
    ab = lb.merge(
        [a, b],
        content="Has a son named Tomas",
        run=first,
        reasoning="t1 and t2 both say he has a son called Tomas; one truth is enough.",
    )
    abc = lb.merge(
        [ab, c],
        content="Has a son called Tomas",
        run=second,
        reasoning="t1 is already a merge; t2 adds nothing new about Tomas, so they merge.",
    )
    return {"user": user, "a": a, "b": b, "c": c, "ab": ab, "abc": abc, "runs": (first, second)}
