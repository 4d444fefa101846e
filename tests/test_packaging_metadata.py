"""The dependency declarations stay one: pyproject.toml declares ranges, requirements/ installs
the app from them under requirements/pins.txt; the package data covers what the admin renders
and the local embedder reads. Fast, without building anything (tests/packaging builds)."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from iris_consolidation import embeddings

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"


def pins() -> dict[str, str]:
    found = {}
    for line in (ROOT / "requirements" / "pins.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            assert spec.operator == "==", f"pins.txt holds exact versions only: {line}"
            found[canonicalize_name(requirement.name)] = spec.version
    return found


def declared() -> list[Requirement]:
    project = PYPROJECT["project"]
    extras = [r for group in project["optional-dependencies"].values() for r in group]
    return [Requirement(r) for r in project["dependencies"] + extras]


def test_every_declared_dependency_is_pinned_within_its_range() -> None:
    pinned = pins()
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} is declared in pyproject.toml but not pinned in pins.txt"
        assert requirement.specifier.contains(pinned[name]), f"pins.txt {name}=={pinned[name]} is outside {requirement}"
        assert not any(s.operator == "==" for s in requirement.specifier), f"pin ranges, not versions: {requirement}"


def test_pins_hold_nothing_undeclared() -> None:
    assert set(pins()) == {canonicalize_name(r.name) for r in declared()}


def test_requirements_install_the_app_from_its_declarations() -> None:
    base = (ROOT / "requirements" / "base.txt").read_text().splitlines()
    assert "-c pins.txt" in base and "-e .[local,multilingual]" in base
    assert not (ROOT / "requirements" / "nodeps.txt").exists()
    assert "--no-deps" not in (ROOT / "Makefile").read_text()


def test_package_data_covers_every_non_python_file_of_the_app() -> None:
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["iris_consolidation"]
    app = ROOT / "iris_consolidation"
    files = [p for p in app.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")]
    covered = {p for pattern in patterns for p in app.glob(pattern)}
    uncovered = [p for p in files if p not in covered and "__pycache__" not in p.parts]
    assert files and not uncovered, uncovered


def test_the_shipped_tokenizer_is_all_minilm_l6_v2s() -> None:
    data = embeddings.TOKENIZER_PATH.read_bytes()
    assert len(data) == 466_247 and hashlib.sha256(data).hexdigest() == TOKENIZER_SHA256
