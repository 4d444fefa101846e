"""Every admin page stays within its query budget on a user with 1,000 truths and a
generation-5 lineage (numbers: benchmarks/admin_query_counts.py)."""

from __future__ import annotations

import pytest

from tests.admin import scale

pytestmark = pytest.mark.django_db


@pytest.fixture
def data():
    return scale.build()


def test_every_page_stays_within_its_query_budget(admin_client, data):
    over = []
    for page in scale.pages(data):
        status, queries = scale.measure(admin_client, page)
        assert status == 200, page.name
        if queries > page.budget:
            over.append((page.name, queries, page.budget))

    assert over == []
