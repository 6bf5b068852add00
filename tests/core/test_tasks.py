"""The worker declares its tasks; the store books by the declared names and never spells the worker's."""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
from pathlib import Path

import pytest
from rq.utils import import_attribute

from jobttl.core.store import tasks
from jobttl.core.store.tasks import GROUP, Tasks, TasksNotDeclared
from jobttl.worker import tasks as worker_tasks

CORE = Path(tasks.__file__).resolve().parents[1]


def _entry_points(**values: str) -> importlib.metadata.EntryPoints:
    return importlib.metadata.EntryPoints(importlib.metadata.EntryPoint(name, value, GROUP)
                                          for name, value in values.items())


def test_the_worker_declares_a_function_of_its_own_for_every_task_the_store_books():
    declared = tasks.declared()
    by_role = {ep.name: ep.load() for ep in importlib.metadata.entry_points(group=GROUP)}
    assert by_role == {"delete": worker_tasks.delete_if_expired, "warn": worker_tasks.warn_upcoming,
                       "resync": worker_tasks.resync}
    for role, function in by_role.items():
        # The name RQ stores is the one RQ imports back, and it is the worker's function.
        assert import_attribute(getattr(declared, role)) is function


def test_the_declared_names_are_the_ones_pending_jobs_already_hold():
    # Every 0.2 release booked its jobs under these names: a pending deletion must still run.
    assert tasks.declared() == Tasks(delete="jobttl.worker.tasks.delete_if_expired",
                                     warn="jobttl.worker.tasks.warn_upcoming", resync="jobttl.worker.tasks.resync")


def test_each_task_takes_the_arguments_the_store_books_it_with():
    assert list(inspect.signature(worker_tasks.delete_if_expired).parameters) == ["member", "due"]
    assert list(inspect.signature(worker_tasks.warn_upcoming).parameters) == ["uid", "due"]
    assert list(inspect.signature(worker_tasks.resync).parameters) == []


def test_a_role_the_package_does_not_declare_stops_the_process_naming_it():
    with pytest.raises(TasksNotDeclared, match="no jobttl.tasks entry point for warn, resync.*pip install"):
        Tasks.from_entry_points(_entry_points(delete="jobttl.worker.tasks:delete_if_expired"))


def test_an_entry_point_naming_a_module_only_is_refused():
    with pytest.raises(TasksNotDeclared, match="delete = 'jobttl.worker.tasks' does not name a function"):
        Tasks.from_entry_points(_entry_points(delete="jobttl.worker.tasks", warn="m:w", resync="m:r"))


def test_entry_points_of_other_groups_are_not_read():
    other = importlib.metadata.EntryPoints([importlib.metadata.EntryPoint("delete", "evil:delete", "other.group")])
    with pytest.raises(TasksNotDeclared, match="delete, warn, resync"):
        Tasks.from_entry_points(other)


@pytest.mark.parametrize(("stored", "role"), [
    ("jobttl.worker.tasks.delete_if_expired", "delete"),
    ("worker.tasks.delete_if_expired", "delete"),  # 0.1's name
    ("worker.tasks.warn_upcoming", "warn"),
    ("worker.tasks.resync", "resync"),
    ("jobttl.worker.tasks.resync", "resync"),
    ("rq.utils.now", None),  # not a jobttl task: the failed-jobs listing leaves it alone
    (None, None),
])
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
    spelled in the core is a dependency import-linter cannot see). 0.1's names are history, not the worker."""
    found = []
    for path in CORE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                    and "jobttl.worker" in node.value:
                found.append(f"{path.relative_to(CORE)}:{node.lineno}: {node.value!r}")
    assert found == []
