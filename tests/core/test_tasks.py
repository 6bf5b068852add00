"""The worker declares its tasks; the store books by the declared names and never spells the worker's."""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
from pathlib import Path

import pytest
from rq.utils import import_attribute

from jobttl.core.runtime.config import ConfigError
from jobttl.core.store import tasks
from jobttl.core.store.tasks import GROUP, Tasks, TasksNotDeclared
from jobttl.worker import tasks as worker_tasks

CORE = Path(tasks.__file__).resolve().parents[1]


def distribution(where: Path, name: str, **values: str) -> importlib.metadata.Distribution:
    """An installed distribution as pip leaves one (a .dist-info folder), declaring `values` in GROUP."""
    info = where / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()))
    return importlib.metadata.PathDistribution(info)


def entry_points(*dists: importlib.metadata.Distribution) -> importlib.metadata.EntryPoints:
    return importlib.metadata.EntryPoints(ep for dist in dists for ep in dist.entry_points)


WHOLE = dict(
    delete="jobttl.worker.tasks:delete_if_expired",
    warn="jobttl.worker.tasks:warn_upcoming",
    resync="jobttl.worker.tasks:resync",
)


def test_the_worker_declares_a_function_of_its_own_for_every_task_the_store_books():
    declared = tasks.declared()
    by_role = {ep.name: ep.load() for ep in importlib.metadata.entry_points(group=GROUP)}
    assert by_role == {
        "delete": worker_tasks.delete_if_expired,
        "warn": worker_tasks.warn_upcoming,
        "resync": worker_tasks.resync,
    }
    for role, function in by_role.items():
        # The name RQ stores is the one RQ imports back, and it is the worker's function.
        assert import_attribute(getattr(declared, role)) is function


def test_the_declared_names_are_the_ones_pending_jobs_already_hold():
    # Every 0.2 release booked its jobs under these names: a pending deletion must still run.
    assert tasks.declared() == Tasks(
        delete="jobttl.worker.tasks.delete_if_expired",
        warn="jobttl.worker.tasks.warn_upcoming",
        resync="jobttl.worker.tasks.resync",
    )


def test_each_task_takes_the_arguments_the_store_books_it_with():
    assert list(inspect.signature(worker_tasks.delete_if_expired).parameters) == ["member", "due"]
    assert list(inspect.signature(worker_tasks.warn_upcoming).parameters) == ["uid", "due"]
    assert list(inspect.signature(worker_tasks.resync).parameters) == ["confirm"]  # Schedule.request_confirmation
    assert (
        inspect.signature(worker_tasks.resync).parameters["confirm"].default is None
    )  # the periodic resync books none


def test_a_role_the_package_does_not_declare_stops_the_process_naming_it(tmp_path):
    with pytest.raises(TasksNotDeclared, match="no jobttl.tasks entry point for warn, resync.*pip install"):
        Tasks.from_entry_points(entry_points(distribution(tmp_path, "jobttl", delete=WHOLE["delete"])))


def test_a_missing_declaration_is_a_configuration_error_the_command_reports_by_name():
    assert issubclass(TasksNotDeclared, ConfigError)


def test_an_entry_point_naming_a_module_only_is_refused(tmp_path):
    dist = distribution(tmp_path, "jobttl", **{**WHOLE, "delete": "jobttl.worker.tasks"})
    with pytest.raises(TasksNotDeclared, match="delete = 'jobttl.worker.tasks' does not name a function"):
        Tasks.from_entry_points(entry_points(dist))


def test_another_package_declaring_the_group_chooses_nothing(tmp_path):
    """Any installed package can declare entry points in any group: only jobttl's own say what a
    booked deletion runs."""
    evil = distribution(tmp_path / "a", "evil", delete="evil.mod:delete", warn="evil.mod:warn", resync="evil.mod:r")
    ours = distribution(tmp_path / "b", "jobttl", **WHOLE)
    for order in ((evil, ours), (ours, evil)):
        assert Tasks.from_entry_points(entry_points(*order)) == tasks.declared()
    with pytest.raises(TasksNotDeclared, match="delete, warn, resync"):
        Tasks.from_entry_points(entry_points(evil))


def test_a_role_declared_twice_differently_is_refused(tmp_path):
    one = distribution(tmp_path / "a", "jobttl", **WHOLE)
    other = distribution(tmp_path / "b", "jobttl", **{**WHOLE, "delete": "jobttl.worker.tasks:resync"})
    with pytest.raises(TasksNotDeclared, match="delete is declared twice"):
        Tasks.from_entry_points(entry_points(one, other))
    assert (
        Tasks.from_entry_points(entry_points(one, distribution(tmp_path / "c", "jobttl", **WHOLE))) == tasks.declared()
    )  # the same declaration twice (an egg-info beside the dist-info) is one


@pytest.mark.parametrize(
    ("stored", "role"),
    [
        ("jobttl.worker.tasks.delete_if_expired", "delete"),
        ("worker.tasks.delete_if_expired", "delete"),  # 0.1's name
        ("worker.tasks.warn_upcoming", "warn"),
        ("worker.tasks.resync", "resync"),
        ("jobttl.worker.tasks.resync", "resync"),
        ("rq.utils.now", None),  # not a jobttl task: the failed-jobs listing leaves it alone
        (None, None),
    ],
)
def test_a_stored_name_is_known_by_its_role_whichever_release_booked_it(stored, role):
    assert tasks.declared().role_of(stored) == role


def test_an_earlier_releases_name_runs_as_todays_task_of_its_role():
    declared = tasks.declared()
    assert declared.current("worker.tasks.delete_if_expired") == declared.delete
    assert declared.current("worker.tasks.warn_upcoming") == declared.warn
    assert declared.current("jobttl.worker.tasks.resync") == declared.resync
    assert declared.current("something.else") == "something.else"


def test_no_code_of_the_core_spells_a_module_of_the_worker():
    """Comments and docstrings may point to the worker; a string the code uses may not (a task name
    spelled in the core is a dependency import-linter cannot see). 0.1's names are history, not the worker.
    A logger's name is neither: the deletion run (jobttl.core.services.deletion) logs as the worker did,
    ``"logger": "jobttl.worker"``, the channel operators filter its lines by."""
    found = []
    for path in CORE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        loggers = {
            id(node.args[0])
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "getLogger"
            and node.args
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and id(node) not in loggers
                and "jobttl.worker" in node.value
            ):
                found.append(f"{path.relative_to(CORE)}:{node.lineno}: {node.value!r}")
    assert found == []
