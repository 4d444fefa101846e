"""The documents stay true to the code and to themselves: every app setting is documented with
its environment variable, every relative link of README.md and docs/ reaches a file and heading
of this repository, every module, file and folder they name exists (so a move that forgets the
documents fails here), and nothing points outside the repository or at a ticket number."""

from __future__ import annotations

import fnmatch
import importlib
import os
import re
from pathlib import Path

import pytest

from iris_consolidation import conf

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
#: Settings without an environment variable (a dict of dotted paths).
NO_VARIABLE = {"JUDGE_CLIENTS"}


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of ``page``: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_app_setting_is_documented_with_its_variable() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    project = (ROOT / "project" / "settings.py").read_text()
    for name in conf.DEFAULTS:
        assert f"IRIS_CONSOLIDATION_{name}" in page, f"docs/configuration.md lacks IRIS_CONSOLIDATION_{name}"
        if name not in NO_VARIABLE:
            assert f'"{name}":' in project, f"project/settings.py does not read IRIS_CONSOLIDATION_{name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_reach_a_file_and_heading(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.is_file() and ROOT in linked.parents, f"{page.name}: {target} is no file of the repository"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{page.name}: {target} names no heading of {linked.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_reference_outside_the_repository_or_to_a_ticket(page: Path) -> None:
    text = page.read_text()
    assert "DESIGN.md" not in text
    assert not re.search(r"\bissues? \d+", text, flags=re.I), re.search(r".{40}\bissues? \d+.{20}", text, flags=re.I)


# --- module names: docs/ and README.md name only modules that exist ---------------------------
# CHANGELOG.md is history: it may name modules that have since moved.
NAMING_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: A file path ending in .py (``services/queue/launch.py``, ``*_display.py``, ``settings.py``).
PY_PATH = re.compile(r"(?<![\w/.*-])((?:[\w*-]+/)*[\w*-]+\.py)\b")
#: A folder in code quotes (``services/queue/``); checked when it starts at a package of the app.
FOLDER = re.compile(r"`((?:[\w-]+/)+)`")
#: A dotted name in code quotes (``services.queue.launch``, ``vectors.embed_missing``).
DOTTED = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)")
#: Dotted names that are not the app's modules: Django's admin site, permission names and
#: check ids (``iris_consolidation.view_truth``, ``iris_consolidation.E005``).
NOT_MODULES = re.compile(r"admin\.site\b.*|iris_consolidation\.(?:(?:add|change|delete|view)_\w+|[EW]\d{3})")
SKIPPED_DIRS = {"node_modules", "build", "dist", "__pycache__"}


def _repository_files() -> list[str]:
    files = []
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS]
        files.extend(Path(folder, name).relative_to(ROOT).as_posix() for name in names)
    return files


def _app_modules() -> dict[str, list[str]]:
    """Each module's last name (``launch``, ``text``) -> the app's dotted modules of that name."""
    found: dict[str, list[str]] = {"iris_consolidation": ["iris_consolidation"]}
    for path in (ROOT / "iris_consolidation").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if "migrations" in parts:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.setdefault(parts[-1], []).append(".".join(parts))
    return found


def _resolves(dotted: str, modules: dict[str, list[str]]) -> bool:
    """Whether ``dotted`` names an attribute or submodule of an app module of its first name.
    A first name that is no module of the app (``np.unique``) is not ours to check."""
    first, *rest = dotted.split(".")
    if first not in modules:
        return True
    if first == "services":  # ``services.queue.launch``: the services package
        modules = {**modules, "services": ["iris_consolidation.services"]}
    for module in modules[first]:
        target: object = importlib.import_module(module)
        path = module
        for part in rest:
            if hasattr(target, part):
                target, path = getattr(target, part), f"{path}.{part}"
                continue
            try:
                target, path = importlib.import_module(f"{path}.{part}"), f"{path}.{part}"
            except ImportError:
                break
        else:
            return True
    return False


def missing_names(text: str) -> list[str]:
    """The files, app packages and dotted names of the app that ``text`` names and the
    repository does not have."""
    files = _repository_files()
    folders = {"/" + str(Path(f).parent) + "/" for f in files}
    packages = {Path(f).parent.name for f in files if f.startswith("iris_consolidation/")} | {"iris_consolidation"}
    modules = _app_modules()
    missing = [
        name for name in PY_PATH.findall(text) if not any(f == name or fnmatch.fnmatch(f, f"*/{name}") for f in files)
    ]
    missing += [
        name
        for name in FOLDER.findall(text)
        if name.split("/")[0] in packages and not any(f.endswith(f"/{name}") for f in folders)
    ]
    missing += [
        name
        for name in DOTTED.findall(text)
        if not name.endswith(".py") and not NOT_MODULES.fullmatch(name) and not _resolves(name, modules)
    ]
    return missing


@pytest.mark.parametrize("page", NAMING_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_module_a_page_names_exists(page: Path) -> None:
    assert missing_names(page.read_text()) == [], f"{page.name} names what the repository does not have"


def test_a_moved_module_or_function_is_caught() -> None:
    text = (
        "Jobs in `services/queue/jobs.py`, settings in `services.operations.live_settings`, the end in "
        "`lifecycle.no_such_function`, folders `services/nowhere/`; fine: `lifecycle.refresh_run`, "
        "`services/queue/launch.py`, `*_display.py`, `text.languages.LEXICON`, `np.unique`, `dist/`, "
        "`iris_consolidation.view_truth`, `admin.site.urls`, `manage.py check`."
    )
    assert missing_names(text) == [
        "services/queue/jobs.py",
        "services/nowhere/",
        "services.operations.live_settings",
        "lifecycle.no_such_function",
    ]
