"""Query counts of the admin pages on one user with 1,000 truths and a generation-5
lineage (32 originals, 31 merges, 5 runs) plus a dry run of 10 previews.

Usage: python benchmarks/admin_query_counts.py
Builds the data set in a throwaway test database (never the project's own data),
requests each page as a logged-in superuser and prints status, queries and budget.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def main() -> int:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment, teardown_test_environment

    from tests.admin import scale

    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        started = time.monotonic()
        data = scale.build()
        built = time.monotonic() - started
        admin = get_user_model().objects.create_superuser("bench", "bench@example.com", "bench")
        client = Client()
        client.force_login(admin)
        print(
            f"data set: {scale.TRUTHS} truths of one user, generation-5 root #{data['root'].pk}; built in {built:.1f} s"
        )
        print(f"{'page':48} {'status':>6} {'queries':>8} {'budget':>7} {'ms':>7}")
        failed = False
        for page in scale.pages(data):
            client.get(page.url)  # warm caches (content types, templates)
            started = time.monotonic()
            status, queries = scale.measure(client, page)
            ms = (time.monotonic() - started) * 1000
            failed |= status != 200 or queries > page.budget
            print(f"{page.name:48} {status:>6} {queries:>8} {page.budget:>7} {ms:>7.0f}")
        return 1 if failed else 0
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()


if __name__ == "__main__":
    raise SystemExit(main())
