"""The command explains itself, and never silently uses a Redis that is not jobttl's.

Each command runs as its own process, as an operator would run it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

import pytest

from jobttl.cli import build_parser
from tests.operate.conftest import Cli
from tests.services import ROOT, RedisServer, wait_for
from tests.worker.stacks import faketime

# Every command that reads or writes Redis, with arguments that would otherwise work.
READS = [("status",), ("pending",), ("show", "team-a/mnist"), ("history",), ("failed",)]
WRITES = [
    ("retry", "delete-0000-1"),
    ("retry", "--all-failed"),
    ("cancel", "team-a/mnist"),
    ("postpone", "team-a/mnist", "2h"),
    ("resync",),
]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    [commands] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


def option_entries(text: str) -> dict[str, str]:
    """Each option of a --help text with its description, joined onto one line."""
    section = text.split("\noptions:\n", 1)[1].split("\n\n", 1)[0]
    entries, current = {}, None
    for line in section.splitlines():
        if re.match(r"^  -", line):
            flags, _, description = line.strip().partition("  ")
            current = flags.split(",")[-1].split()[0]
            entries[current] = description.strip()
        elif current is not None:
            entries[current] += " " + line.strip()
    return entries


def test_the_help_of_every_command_describes_every_flag_with_its_default():
    commands = subcommands()
    assert {
        "sink",
        "worker",
        "watch",
        "resync",
        "explain",
        "status",
        "pending",
        "show",
        "history",
        "failed",
        "retry",
        "cancel",
        "postpone",
        "held",
        "manifests",
    } <= set(commands)
    for name, parser in commands.items():
        text = parser.format_help()
        flags = {option for action in parser._actions for option in action.option_strings[-1:]} - {"--help"}
        entries = option_entries(text)
        assert set(entries) - {"--help"} == flags, name
        for flag in flags:
            described = entries[flag]
            assert re.search(r"\((default: [^)]|required\))", described), f"jobttl {name} {flag}: {described!r}"
            assert "default: None" not in described and "default: False" not in described, f"{name} {flag}"
            assert len(described.split("(")[0].split()) >= 2, f"jobttl {name} {flag} has no description"
        positionals = [a for a in parser._actions if not a.option_strings]
        assert all(a.help for a in positionals), name
        environment = text.split("\nenvironment", 1)[1]
        variables = re.findall(r"^  ([A-Z_]+) \(default: ", environment, re.MULTILINE)
        assert variables, f"jobttl {name} names no environment variable"
        if "JOBTTL_REDIS_URL" in variables or name not in ("watch", "explain", "logs", "manifests"):
            assert variables[0] == "JOBTTL_REDIS_URL", name
    sink = option_entries(commands["sink"].format_help())
    assert "(default: 0.0.0.0)" in sink["--host"] and "(default: 8080)" in sink["--port"]


def test_help_is_what_the_installed_command_prints():
    done = subprocess.run(
        [sys.executable, "-m", "jobttl", "history", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0 and done.stdout == subcommands()["history"].format_help()


def test_a_checker_that_lets_a_bare_flag_through_is_caught():
    parser = argparse.ArgumentParser(formatter_class=subcommands()["status"].formatter_class)
    parser.add_argument("--bare", help="says nothing about its default")
    entries = option_entries(parser.format_help())
    assert not re.search(r"\((default: [^)]|required\))", entries["--bare"])


# --- the wrong Redis ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stranger():
    """Some other Redis on the machine: never used by jobttl, holding someone else's keys."""
    server = RedisServer().start()
    server.client().set("someone-elses:key", "x")
    yield server
    server.stop()


@pytest.fixture
def misdirected(stranger, stack_env) -> Cli:
    env = {**os.environ, "JOBTTL_REDIS_URL": stranger.url, "KUBECONFIG": stack_env["KUBECONFIG"]}
    env.pop("JOBTTL_QUEUE", None)
    return Cli(env)


@pytest.mark.parametrize("command", READS + WRITES, ids=" ".join)
def test_every_command_refuses_a_redis_that_holds_no_jobttl_schedule(misdirected, stranger, command):
    done = misdirected.run(*command)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"JOBTTL_REDIS_URL={stranger.url}" in done.stderr and "no jobttl schedule" in done.stderr
    assert "--force" in done.stderr and done.stdout == ""
    assert stranger.client().keys("*") == [b"someone-elses:key"], "nothing written"


def test_force_reads_and_writes_that_redis_anyway(misdirected, stranger):
    status = misdirected.run("status", "--json", "--force")
    assert status.returncode == 0 and '"workers": []' in status.stdout
    assert misdirected.run("history", "--force").returncode == 0
    cancel = misdirected.run("cancel", "team-a/mnist", "--force")
    assert cancel.returncode == 1 and "no pending deletion" in cancel.stderr, "past the check, to the lookup"
    assert misdirected.run("retry", "--all-failed", "--force").returncode == 0
    assert stranger.client().keys("*") == [b"someone-elses:key"], "finding nothing, it wrote nothing"


def test_jobttls_own_redis_is_recognised(cluster, cli):
    """The operate stack's Redis: its sink and worker, once started, mark it as jobttl's."""
    done = cli.run("status")
    assert done.returncode == 0, done.stderr


# --- what the tables say ---------------------------------------------------------------------------

EPOCH = re.compile(r"(?<![\w.-])1\d{9}(\.\d+)?(?![\w.])")  # Unix seconds, this century
JOB_ID = re.compile(r"\b(delete|pods)-[0-9a-f-]{36}-\d+\b")  # an RQ job id names its due time: an id, not a time


def test_show_explains_a_kept_job_and_no_table_prints_a_raw_epoch(cluster, cli):
    ns, now = cluster.namespace, time.time()
    kept = cluster.create_finished("no-ttl", ttl=None, finished_at=now - 60)
    assert cluster.event("update", kept).headers["X-Jobttl-Outcome"].startswith("ignored")
    for name, ttl in (("later", 3600), ("done", 0)):
        obj = cluster.create_finished(name, ttl=ttl, finished_at=now - 30)
        assert cluster.event("update", obj).headers["X-Jobttl-Outcome"] == "scheduled"
    assert cli.run("postpone", f"{ns}/later", "2h").returncode == 0
    cluster.wait_gone("done")
    wait_for(
        lambda: "deleted" in [e["event"] for e in cli.json("history", "--namespace", ns)["items"]],
        what="the deletion to be recorded",
    )

    # Why is it still here? The latest decision about it, though it never changed the schedule.
    [decision] = cli.json("show", f"{ns}/no-ttl")["decisions"]
    assert (decision["event"], decision["reason"], decision["uid"]) == ("skipped", "no-ttl", kept["metadata"]["uid"])
    shown = cli.run("show", f"{ns}/no-ttl")
    assert shown.returncode == 0 and "latest decision skipped, no-ttl: " in shown.stdout, shown.stdout
    assert "no pending deletion" in shown.stdout

    for command in (
        ("pending", "--namespace", ns),
        ("history", "--namespace", ns),
        ("show", f"{ns}/later"),
        ("show", f"{ns}/done"),
        ("show", f"{ns}/no-ttl"),
        ("status",),
        ("failed",),
    ):
        done = cli.run(*command)
        assert done.returncode == 0, done.stderr
        assert not EPOCH.search(JOB_ID.sub("<job id>", done.stdout)), f"jobttl {' '.join(command)}:\n{done.stdout}"
    history = cli.run("history", "--namespace", ns).stdout
    assert "previousDue=20" in history and "newDue=20" in history and "goneAfter=" in history


def test_history_of_one_job_is_its_own_entries_only(cluster, cli):
    ns, now = cluster.namespace, time.time()
    for name in ("one", "other"):
        obj = cluster.create_finished(name, ttl=3600, finished_at=now - 30)
        assert cluster.event("update", obj).headers["X-Jobttl-Outcome"] == "scheduled"
    assert cli.run("postpone", f"{ns}/one", "2h").returncode == 0
    items = cli.json("history", f"{ns}/one")["items"]
    assert {e["name"] for e in items} == {"one"} and [e["event"] for e in items][-1] == "scheduled"
    assert "moved" in [e["event"] for e in items], "the postpone"
    assert [e["event"] for e in cli.json("history", f"{ns}/one", "--event", "scheduled")["items"]] == ["scheduled"]
    assert cli.json("history", f"{ns}/nothing-here")["items"] == []
    assert cli.run("history", "not-a-job").returncode == 2


def test_postpone_counts_from_redis_now_not_the_operators_clock(cluster, cli):
    """An operator's host 2 h ahead: 'postpone 5m' of a deletion due in an hour is 5 min after it."""
    ns, now = cluster.namespace, time.time()
    obj = cluster.create_finished("ahead", ttl=3600, finished_at=now - 60)
    assert cluster.event("update", obj).headers["X-Jobttl-Outcome"] == "scheduled"
    due = int(now - 60) + 3600
    ahead = Cli({**cli.env, **faketime("+2h")})
    done = ahead.run("postpone", f"{ns}/ahead", "5m")
    assert done.returncode == 0, done.stderr
    [pending] = [p for p in cli.json("pending", "--namespace", ns)["items"] if p["name"] == "ahead"]
    assert abs(pending["due"] - (due + 300)) <= 2, (pending["due"], due)


def test_the_epoch_check_catches_one():
    assert EPOCH.search("due=1796121233  by=worker") and EPOCH.search("goneAfter 1796121233.5")
    assert not EPOCH.search(JOB_ID.sub("", "job id delete-6b7de4ed-dc09-48d8-892c-3e5238c7aa11-1796121233"))


# --- mistakes on the command line --------------------------------------------------------------------


def jobttl(*args: str, env: dict[str, str] | None = None, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobttl", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=30
    )


def test_an_unknown_option_prints_the_usage_of_the_command_it_was_given_to():
    done = jobttl("pending", "--namespce", "team-a")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("usage: jobttl pending "), done.stderr
    assert "unrecognized arguments: --namespce team-a; did you mean --namespace?" in done.stderr


@pytest.mark.parametrize("duration", ["-5m", "-2h30m", "0s", "-90"])
def test_postpone_by_a_negative_or_zero_duration_says_it_must_be_positive(duration):
    done = jobttl("postpone", "team-a/mnist", duration)
    assert done.returncode == 2 and done.stderr.startswith("usage: jobttl postpone "), done.stderr
    assert "a duration must be positive" in done.stderr and "required" not in done.stderr


def test_postpone_needs_a_duration_or_undo_but_not_both():
    assert "give DURATION, or --undo" in jobttl("postpone", "team-a/mnist").stderr
    assert "--undo takes no DURATION" in jobttl("postpone", "--undo", "team-a/mnist", "2h").stderr


# --- a shell that sourced the .run/env of an earlier `make run` -----------------------------------------


def test_a_refused_connection_after_make_run_restarted_says_to_source_run_env_again(tmp_path):
    from jobttl_emulator.localstack import write_environment
    from tests.services import free_port

    old, new = (f"redis://127.0.0.1:{free_port()}/0" for _ in range(2))  # nothing listens on either
    run_dir = tmp_path / ".run"
    run_dir.mkdir()
    env_file = write_environment(run_dir, {"JOBTTL_REDIS_URL": old})
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTTL_")}
    script = (
        f". {env_file} && {sys.executable} -c 'import sys; from jobttl_emulator.localstack import "
        f'write_environment as w; from pathlib import Path; w(Path(sys.argv[1]), {{"JOBTTL_REDIS_URL": '
        f"sys.argv[2]}})' {run_dir} {new} && {sys.executable} -m jobttl status"
    )
    restarted = subprocess.run(["bash", "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert restarted.returncode == 1 and f"JOBTTL_REDIS_URL={old}" in restarted.stderr
    assert "`make run` was restarted" in restarted.stderr and f"its Redis is now at {new}" in restarted.stderr
    assert f"`. {env_file}` again" in restarted.stderr, restarted.stderr

    stopped = subprocess.run(
        ["bash", "-c", f". {env_file} && rm {env_file} && {sys.executable} -m jobttl status"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert stopped.returncode == 1 and "is gone: the `make run` that wrote it has stopped" in stopped.stderr

    # Redis simply down, no make run involved: the error alone, no guess about make run.
    plain = jobttl("status", env={**env, "JOBTTL_REDIS_URL": old}, cwd=tmp_path)
    assert plain.returncode == 1 and "Connection refused" in plain.stderr and "make run" not in plain.stderr

    # An env file of a make run from before JOBTTL_RUN_ENV, or none sourced: the .run/env here is read.
    write_environment(run_dir, {"JOBTTL_REDIS_URL": new})
    here = jobttl("status", env={**env, "JOBTTL_REDIS_URL": old}, cwd=tmp_path)
    assert here.returncode == 1 and f".run/env names another Redis, {new}" in here.stderr, here.stderr


def test_make_runs_countdown_prints_durations_as_jobttl_does():
    from jobttl_emulator.localstack import countdown

    assert [countdown(s) for s in (7195, 90, 45, 2 * 86400 + 3 * 3600 + 7, 0)] == [
        "in 1h59m",
        "in 1m30s",
        "in 45s",
        "in 2d3h",
        "due now",
    ]
