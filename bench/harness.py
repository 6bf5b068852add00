"""What every row shares: processes, rounds, medians, and the one table.

A row measures named *sides* (jobttl with some setting, or a baseline program) once per
round, interleaved (jobttl, baseline, jobttl, baseline, ...), and then says which pairs the
table compares. Only ratios measured in the same run mean much on a shared machine.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobttl_emulator.localstack import stop_process_group

ROOT = Path(__file__).resolve().parents[1]


# --- processes ---------------------------------------------------------------------------------


def spawn(argv: list[str], env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen:
    """A child in its own session (so it and its children stop together), output to `log`."""
    out = open(log, "ab") if log else subprocess.DEVNULL
    return subprocess.Popen(
        argv, env={**os.environ, **(env or {})}, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def stop(process: subprocess.Popen, timeout: float = 20) -> None:
    """A process `spawn` started, with its children: as `make run` stops its own."""
    stop_process_group(process, grace=timeout)


@dataclass(frozen=True)
class Usage:
    wall: float
    cpu: float  # user + system seconds of the process (and the children it waited for)
    maxrss_mb: float
    returncode: int


def run_measured(
    argv: list[str], env: dict[str, str], log: Path, timeout: float = 3600, stdout: Path | None = None
) -> Usage:
    """Run a process to its end; its own wall time, CPU time and peak RSS (os.wait4)."""
    with open(log, "ab") as err, open(stdout or log, "ab") as out:
        started = time.perf_counter()
        process = subprocess.Popen(argv, env={**os.environ, **env}, cwd=ROOT, stdout=out, stderr=err)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, rusage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                process.kill()
                pid, status, rusage = os.wait4(process.pid, 0)
                break
            time.sleep(0.01)
        wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    return Usage(wall, rusage.ru_utime + rusage.ru_stime, rusage.ru_maxrss / 1024, process.returncode)


# --- results -------------------------------------------------------------------------------------


@dataclass
class Side:
    """One program measured once per round."""

    name: str  # what the table calls it
    unit: str
    higher_is_better: bool = True
    values: list[float] = field(default_factory=list)
    # Per-round extras: round_trips / commands per operation, CPU, ... (medians are reported).
    extras: dict[str, list[float]] = field(default_factory=dict)

    def add(self, value: float, **extras: float | None) -> None:
        self.values.append(value)
        for key, extra in extras.items():
            if extra is not None:
                self.extras.setdefault(key, []).append(extra)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    def extra(self, key: str) -> float | None:
        values = self.extras.get(key)
        return statistics.median(values) if values else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "values": self.values,
            "median": self.median,
            "min": min(self.values) if self.values else None,
            "max": max(self.values) if self.values else None,
            "extras": {k: {"values": v, "median": statistics.median(v)} for k, v in self.extras.items()},
        }


@dataclass(frozen=True)
class Line:
    """One line of the table: a jobttl side against a baseline side."""

    row: str
    jobttl: str  # side names
    baseline: str
    target: str = ""  # e.g. ">= 0.5" (on the ratio jobttl / baseline)
    note: str = ""
    absolute: bool = False  # the target is on jobttl's own median (e.g. "<= 1.0" s), not on the ratio

    def ratio(self, sides: dict[str, Side]) -> float:
        return sides[self.jobttl].median / sides[self.baseline].median

    def met(self, sides: dict[str, Side]) -> bool | None:
        if not self.target:
            return None
        op, value = self.target.split()
        measured = sides[self.jobttl].median if self.absolute else self.ratio(sides)
        return measured >= float(value) if op == ">=" else measured <= float(value)


@dataclass
class RowResult:
    key: str
    title: str
    sides: dict[str, Side] = field(default_factory=dict)
    lines: list[Line] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)  # breakdowns, ceilings, settings

    def side(self, name: str, unit: str, higher_is_better: bool = True) -> Side:
        if name not in self.sides:
            self.sides[name] = Side(name, unit, higher_is_better)
        return self.sides[name]

    def as_dict(self) -> dict[str, Any]:
        lines = []
        for line in self.lines:
            if line.jobttl in self.sides and line.baseline in self.sides:
                lines.append(
                    {
                        "row": line.row,
                        "jobttl": line.jobttl,
                        "baseline": line.baseline,
                        "ratio": line.ratio(self.sides),
                        "target": line.target,
                        "met": line.met(self.sides),
                        "note": line.note,
                        "absolute": line.absolute,
                    }
                )
        return {
            "key": self.key,
            "title": self.title,
            "sides": {k: s.as_dict() for k, s in self.sides.items()},
            "lines": lines,
            "facts": self.facts,
        }


def interleave(rounds: int, steps: list[tuple[str, Any]]) -> None:
    """Run each step once per round, in order, so the sides alternate."""
    for number in range(rounds):
        for label, step in steps:
            print(f"    round {number + 1}/{rounds}: {label}", flush=True)
            step()


# --- the table -----------------------------------------------------------------------------------


def _num(value: float | None, digits: int = 0) -> str:
    if value is None or value != value:
        return "–"
    if abs(value) >= 100 or digits == 0:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def _spread(side: Side) -> str:
    if not side.values:
        return "–"
    digits = 0 if side.median >= 100 else 2
    return "/".join(_num(v, digits) for v in (min(side.values), side.median, max(side.values)))


def _rt(side: Side) -> str:
    rt, commands = side.extra("round_trips"), side.extra("commands")
    if rt is None:
        return f"– ({commands:.{0 if commands >= 10 else 1}f} cmds)" if commands is not None else "–"
    digits = 1 if rt >= 1 else 2 if rt >= 0.1 else 3
    return (
        f"{rt:.{digits}f} ({commands:.{0 if commands >= 10 else 1}f} cmds)"
        if commands is not None
        else f"{rt:.{digits}f}"
    )


def _target(line: Line, side: Side) -> str:
    text = line.target.replace(">=", "≥").replace("<=", "≤")
    if text and line.absolute:
        return f"{text} {side.unit}"
    return f"{text}×" if text else ""


def table(results: list[RowResult]) -> str:
    head = (
        "| row | jobttl | baseline | ratio | target | jobttl min/med/max | baseline min/med/max "
        "| Redis round trips per op: jobttl / baseline |"
    )
    rows = [head, "|" + "---|" * 8]
    for result in results:
        for line in result.lines:
            if line.jobttl not in result.sides or line.baseline not in result.sides:
                continue
            j, b = result.sides[line.jobttl], result.sides[line.baseline]
            met = line.met(result.sides)
            verdict = "" if met is None else (" ✓" if met else " ✗")
            digits = 0 if j.median >= 100 else 2
            rows.append(
                f"| {line.row} | {line.jobttl}: {_num(j.median, digits)} {j.unit} "
                f"| {line.baseline}: {_num(b.median, 0 if b.median >= 100 else 2)} {b.unit} "
                f"| {line.ratio(result.sides):.2f}× | {_target(line, j)}"
                f"{verdict} | {_spread(j)} | {_spread(b)} | {_rt(j)} / {_rt(b)} |"
            )
    return "\n".join(rows)


def from_dict(data: dict[str, Any]) -> RowResult:
    """A row again, from the JSON the benchmark wrote (`python -m bench.report` re-renders it)."""
    result = RowResult(data["key"], data["title"], facts=data.get("facts", {}))
    for name, side in data["sides"].items():
        result.sides[name] = Side(
            name,
            side["unit"],
            side.get("higher_is_better", True),
            list(side["values"]),
            {k: list(v["values"]) for k, v in side.get("extras", {}).items()},
        )
    for line in data["lines"]:
        result.lines.append(
            Line(
                line["row"],
                line["jobttl"],
                line["baseline"],
                line.get("target", ""),
                line.get("note", ""),
                line.get("absolute", False),
            )
        )
    return result
