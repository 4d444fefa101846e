"""End-to-end tests in Debian's Chromium, driven by Playwright for Python.

CI installs the browser with ``apt-get install -y --no-install-recommends chromium``;
Playwright's own browser download (``playwright install``) is never used. Without
Chromium these tests skip with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
NO_CHROMIUM = f"needs Debian's chromium at {CHROMIUM}: apt-get install -y --no-install-recommends chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    if not CHROMIUM.exists():
        pytest.skip(NO_CHROMIUM)
    return {
        **browser_type_launch_args,
        "executable_path": str(CHROMIUM),
        "args": [
            "--no-sandbox",  # the tests run as root in CI containers
            "--headless",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
        ],
    }


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_context_args, "viewport": {"width": 1360, "height": 900}}


@pytest.fixture
def artifacts() -> Path:
    """Folder for screenshots (gitignored); CI keeps it as a build artifact."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def operator(django_user_model: Any) -> Any:
    """A superuser who logs in through the admin's login form."""
    return django_user_model.objects.create_superuser("operator", "operator@example.com", PASSWORD)


@pytest.fixture
def logged_in(page: Any, live_server: Any, operator: Any) -> Any:
    """The page, logged in to the admin of the live server."""
    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")
    return page
