"""What the wheel ships: one `jobttl.*` namespace, no test tooling, imports that go one way, and
the license (in the sdist too).

The wheel is built as `pip wheel` builds it, unpacked, and checked there: that is the tree
the import-linter contracts in pyproject.toml are about (the repository's folders become
`jobttl.core`, `jobttl.sink`, ... only once installed).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.deploy.manifests import REPO

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def build_wheel(source: Path, out: Path) -> tuple[Path, str]:
    """`pip wheel` of a distribution, as `pip install` builds it (build isolation, the backend's
    own setuptools), verbose: the built wheel and everything the build printed."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    [built] = out.glob("*.whl")
    return built, done.stdout + done.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    return build_wheel(REPO, tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def wheel(built) -> Path:
    return built[0]


# What setuptools prints of a folder Python could import that the package list leaves out (the
# build takes its files as data all the same): a wall of "Package would be ignored" banners.
SETUPTOOLS_WARNINGS = (
    "Package would be ignored",
    "BuildBackendWarning",
    "SetuptoolsDeprecationWarning",
    "SetuptoolsWarning",
)


def setuptools_warnings(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if any(w in line for w in SETUPTOOLS_WARNINGS)]


def test_building_jobttl_and_the_emulator_prints_no_setuptools_warning(built, tmp_path):
    """`pip install .` (and make's `pip install -e . -e ./emulator`) build quietly: each folder of
    data (core/store/lua/, the emulator's seeds/) is declared as the package it is."""
    assert setuptools_warnings(built[1]) == []
    _, emulator_output = build_wheel(REPO / "emulator", tmp_path)
    assert setuptools_warnings(emulator_output) == []


@pytest.fixture(scope="module")
def unpacked(wheel, tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)  # noqa: S202 - the wheel this test built
    return target


CONTRACTS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def lint_imports(site: Path) -> subprocess.CompletedProcess:
    # From the unpacked wheel's own directory: import-linter puts the working directory first
    # on the path, so it reads what ships, not the repository.
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(REPO / "pyproject.toml")],
        cwd=site,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_everything_installs_under_one_namespace(unpacked):
    top = {p.name for p in unpacked.iterdir() if not p.name.endswith(".dist-info")}
    assert top == {"jobttl"}, "no top-level sink, worker, watcher or emulator packages to collide with"
    assert {p.name for p in (unpacked / "jobttl").iterdir() if p.is_dir() and p.name != "__pycache__"} == {
        "cli",
        "core",
        "sink",
        "worker",
        "watcher",
        "notifier",
        "console",
    }


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sdist")
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--outdir", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [built] = out.glob("jobttl-*.tar.gz")
    return built


def test_the_wheel_and_the_sdist_carry_the_apache_license(wheel, unpacked, sdist):
    license_text = (REPO / "LICENSE").read_text()
    # The SHA-256 of https://www.apache.org/licenses/LICENSE-2.0.txt: the whole text, verbatim.
    assert (
        hashlib.sha256(license_text.encode()).hexdigest()
        == "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
    )
    [dist_info] = unpacked.glob("jobttl-*.dist-info")
    assert (dist_info / "licenses" / "LICENSE").read_text() == license_text
    metadata = (dist_info / "METADATA").read_text()
    assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata
    with tarfile.open(sdist) as archive:
        [member] = [m for m in archive.getmembers() if m.name.endswith("/LICENSE") and m.name.count("/") == 1]
        assert archive.extractfile(member).read().decode() == license_text


def test_the_wheel_carries_no_test_tooling(unpacked):
    shipped = [p.relative_to(unpacked).as_posix() for p in unpacked.rglob("*") if p.is_file()]
    assert not [p for p in shipped if "emulator" in p or p.startswith("tests/") or "conftest" in p]


def test_the_import_contracts_hold_in_what_ships(unpacked):
    result = lint_imports(unpacked)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(CONTRACTS)} kept, 0 broken" in result.stdout


def test_the_import_contracts_hold_in_the_repository_as_a_developer_runs_them():
    """`lint-imports` from the repository root finds each of the contracts' root packages where the
    editable install maps it (jobttl.core in core/, ...)."""
    result = subprocess.run([str(LINT_IMPORTS)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(CONTRACTS)} kept, 0 broken" in result.stdout


# The namespace's sub-packages, each at its one folder (pyproject.toml's package-dir).
FOLDERS = {
    f"jobttl.{name}": REPO / ("jobttl/cli" if name == "cli" else name)
    for name in ("cli", "core", "sink", "worker", "watcher", "notifier", "console")
}
# The contracts see the emulator too (no import cycle there either); it does not ship.
CHECKED = {**FOLDERS, "jobttl_emulator": REPO / "emulator" / "jobttl_emulator"}


def test_the_contracts_see_every_module_in_the_repository():
    """The graph lint-imports checks from the repository root holds every module of the seven
    folders and the emulator's: a folder it could not find would make its contracts hold of nothing."""
    roots = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
    assert set(roots) == set(CHECKED)
    code = f"import grimp, json; print(json.dumps(sorted(grimp.build_graph(*{roots!r}).modules)))"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    expected = set(CHECKED)
    for package, folder in CHECKED.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            expected.add(".".join((package, *parts[:-1])) if parts[-1] == "__init__" else ".".join((package, *parts)))
    assert set(json.loads(result.stdout)) == expected


def test_each_module_has_one_path_its_file_in_the_repository():
    """No links under jobttl/: the build maps the folders (package-dir), and Python run from the
    repository root (as pytest, make run and lint-imports are) loads each sub-package from its
    folder, the path a traceback, coverage or an editor shows."""
    assert [p for p in (REPO / "jobttl").rglob("*") if p.is_symlink()] == []
    assert not (REPO / "jobttl" / "__init__.py").exists(), (
        "jobttl is a namespace: lint-imports's roots are its packages"
    )
    code = f"import importlib; print('\\n'.join(importlib.import_module(n).__file__ for n in {sorted(FOLDERS)!r}))"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(FOLDERS[n] / "__init__.py") for n in sorted(FOLDERS)]


@pytest.mark.parametrize(
    "module, line",
    [
        ("core/store/schedule.py", "import jobttl.worker.tasks\n"),  # the core climbing up to a process
        ("sink/api.py", "import jobttl.worker.tasks\n"),  # one process importing another
        ("worker/tasks.py", "import jobttl.core.store.keys\n"),  # the worker writing Redis around the services
        ("worker/tasks.py", "import kubernetes.client\n"),  # the API reached around the core's client
    ],
)
def test_a_broken_layer_is_caught(unpacked, tmp_path, module, line):
    broken = tmp_path / "site"
    shutil.copytree(unpacked, broken)
    path = broken / "jobttl" / module
    path.write_text(line + path.read_text())
    result = lint_imports(broken)
    assert result.returncode != 0 and "BROKEN" in result.stdout


@pytest.mark.parametrize("folder", ["core", "sink", "worker", "watcher", "notifier", "console"])
def test_a_folder_cannot_be_imported_under_its_bare_name(folder):
    """The repository root is on the path wherever pytest runs (for `tests`): there `worker.x` and
    `jobttl.worker.x` would be two modules, with two sets of classes and enums."""
    result = subprocess.run([sys.executable, "-c", f"import {folder}"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode != 0 and f"import jobttl.{folder}, not {folder}" in result.stderr


def test_the_wheel_and_the_sdist_ship_every_lua_script_as_it_is_in_the_repository(unpacked, sdist):
    """The scripts are read from their files when jobttl.core.store.scripts is imported: one left out
    and no process starts."""
    scripts = {p.name: p.read_text() for p in (REPO / "core" / "store" / "lua").glob("*.lua")}
    assert len(scripts) > 10
    assert {p.name: p.read_text() for p in (unpacked / "jobttl" / "core" / "store" / "lua").glob("*.lua")} == scripts
    with tarfile.open(sdist) as archive:
        shipped = {
            Path(m.name).name: archive.extractfile(m).read().decode()
            for m in archive.getmembers()
            if m.name.endswith(".lua") and "/core/store/lua/" in m.name
        }
    assert shipped == scripts


def test_the_wheel_declares_the_workers_tasks_the_store_books_by(unpacked):
    """The sink books RQ jobs by the names the worker declares in the package's metadata
    (jobttl.core.store.tasks): an installed wheel without them could book nothing."""
    import configparser

    [dist_info] = unpacked.glob("jobttl-*.dist-info")
    entry_points = configparser.ConfigParser()
    entry_points.read_string((dist_info / "entry_points.txt").read_text())
    assert dict(entry_points["jobttl.tasks"]) == {
        "delete": "jobttl.worker.tasks:delete_if_expired",
        "warn": "jobttl.worker.tasks:warn_upcoming",
        "resync": "jobttl.worker.tasks:resync",
    }
    for value in entry_points["jobttl.tasks"].values():
        module, function = value.split(":")
        assert f"def {function}(" in (unpacked / (module.replace(".", "/") + ".py")).read_text()
