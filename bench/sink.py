"""Rows 1-3: the sink under a real HTTP load generator, against a no-op app served the same way.

wrk (Debian's) drives both over keep-alive connections, one connection per sink thread,
for a fixed time per round; a Lua script gives every request a fresh name, UID and event id
(rows 1 and 3) or sends the very same event again and again (row 2: the first copy is sent
before the round, so every measured one is a duplicate). wrk rather than a Python generator:
a Python client would need most of a core to build and send ~10 KB requests at these rates,
on a 2-core machine where the server needs the rest; wrk's LuaJIT fills the templates in
microseconds. Bodies are the binary-mode CloudEvents ApiServerSource sends (bench.objects).
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import time
from pathlib import Path

import requests

from bench.harness import Line, RowResult, interleave, python, spawn, stop
from bench.objects import binary_event, event_template, fresh_uid, realistic_tfjob
from bench.redis_side import RedisSide
from jobttl.cli import build_parser
from jobttl_emulator.localstack import free_port
from tests.services import wait_for

LUA = r"""
local parts = {PARTS}
local tokens = {TOKENS}
local headers = {HEADERS}
local subject = SUBJECT
local fresh = FRESH
local prefix = PREFIX
local tid, counter = 0, 0
local next_tid = 1

function setup(thread)
  thread:set("tid", next_tid)
  next_tid = next_tid + 1
end

function request()
  counter = counter + 1
  local id = string.format("%08x-%04x-4000-8000-%012x", prefix, tid, counter)
  if not fresh then
    headers["ce-id"] = id
    return wrk.format("POST", "/", headers, parts[1])
  end
  local name = string.format("j%x-%d-%d", prefix, tid, counter)
  local values = {name = name, uid = id}
  local body = {}
  for i, part in ipairs(parts) do
    body[#body + 1] = part
    if tokens[i] then body[#body + 1] = values[tokens[i]] end
  end
  headers["ce-id"] = id
  headers["ce-subject"] = subject .. name
  headers["ce-name"] = name
  return wrk.format("POST", "/", headers, table.concat(body))
end

function done(summary, latency, requests)
  io.write(string.format('\nBENCH {"requests": %d, "duration_us": %d, "connect": %d, "read": %d, "write": %d, ' ..
    '"status": %d, "timeout": %d, "p50_us": %d, "p99_us": %d}\n', summary.requests, summary.duration,
    summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.status,
    summary.errors.timeout, latency:percentile(50), latency:percentile(99)))
end
"""


def _lua_string(text: str) -> str:
    level = 1  # [=[...]=]: a text ending in "]" cannot close it early
    while f"]{'=' * level}]" in text:
        level += 1
    return f"[{'=' * level}[{text}]{'=' * level}]"


def wrk_script(
    path: Path,
    headers: dict[str, str],
    body: bytes,
    fresh: bool,
    prefix: int,
    name: str | None = None,
    uid: str | None = None,
    pace_ms: int | None = None,
) -> Path:
    """A wrk script sending `body` (its `name` and `uid` replaced per request when `fresh`); with
    `pace_ms`, each connection waits that long after an answer before its next request (wrk's `delay`)."""
    text = body.decode()
    if fresh:
        pieces = re.split(f"({re.escape(name)}|{re.escape(uid)})", text)
        parts, tokens = pieces[0::2], ["name" if p == name else "uid" for p in pieces[1::2]]
    else:
        parts, tokens = [text], []
    subject = headers.get("ce-subject", "").rsplit("/", 1)[0] + "/"
    sent = {k: v for k, v in headers.items() if k.lower() != "content-length"}
    script = (
        LUA.replace("{PARTS}", "{" + ", ".join(_lua_string(p) for p in parts) + "}")
        .replace("{TOKENS}", "{" + ", ".join(f'"{t}"' for t in tokens) + "}")
        .replace(
            "{HEADERS}", "{" + ", ".join(f"[ {_lua_string(k)} ] = {_lua_string(v)}" for k, v in sent.items()) + "}"
        )
        .replace("SUBJECT", _lua_string(subject))
        .replace("FRESH", "true" if fresh else "false")
        .replace("PREFIX", str(prefix))
    )
    if pace_ms is not None:
        script += f"\nfunction delay()\n  return {int(pace_ms)}\nend\n"
    path.write_text(script)
    return path


def wrk(url: str, script: Path, seconds: float, connections: int) -> dict:
    """One wrk run (one thread: the load generator should take as little CPU as it can)."""
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result = json.loads(out.split("BENCH ", 1)[1])
    result["rate"] = result["requests"] / (result["duration_us"] / 1e6)
    result["errors"] = sum(result[k] for k in ("connect", "read", "write", "status", "timeout"))
    return result


class Sinks:
    """The jobttl sink (`python -m jobttl sink`, production defaults), the same sink with the
    opt-in duplicate memory (JOBTTL_SINK_DEDUPE_SECONDS), and the no-op, each started once."""

    def __init__(self, workdir: Path, redis: RedisSide, counting: Path | None = None):
        self.threads = build_parser().parse_args(["sink"]).threads  # `jobttl sink`'s default, as deployed
        self.ports = {"jobttl": free_port(), "dedupe": free_port(), "noop": free_port()}
        env = {"JOBTTL_REDIS_URL": redis.url, "JOBTTL_QUEUE": "bench"}
        prefix = python("-m", "bench.counting", str(counting)) if counting else python()
        self.processes = {
            side: spawn(
                [*prefix, "-m", "jobttl", "sink", "--host", "127.0.0.1", "--port", str(self.ports[side])],
                {**env, **extra},
                workdir / f"sink-{side}.log",
            )
            for side, extra in (("jobttl", {}), ("dedupe", {"JOBTTL_SINK_DEDUPE_SECONDS": str(DEDUPE_SECONDS)}))
        }
        self.processes["noop"] = spawn(
            python("-m", "bench.noop_sink", "--port", str(self.ports["noop"])), {}, workdir / "noop.log"
        )
        for port in self.ports.values():
            wait_for(
                lambda: requests.post(f"http://127.0.0.1:{port}/", timeout=1) is not None,
                timeout=30,
                what=f"a sink on {port}",
            )

    @property
    def jobttl(self):
        return self.processes["jobttl"]

    def url(self, side: str) -> str:
        return f"http://127.0.0.1:{self.ports[side]}/"

    def stop(self) -> None:
        for process in self.processes.values():
            stop(process)


DEDUPE_SECONDS = 10

# Every wrk run gets its own prefix, so no two requests in a run share a name or UID.
_PREFIXES = itertools.count(int(time.time()) % 100_000 * 1000)

KINDS = {
    "new": ("1. sink, new finished jobs", "succeeded", True, ">= 0.5"),
    "duplicate": ("2. sink, duplicate events", "succeeded", False, ">= 0.7"),
    "running": ("3. sink, running-job events", "running", True, ""),
}


def event_for(state: str, fresh: bool, duplicate_name: str) -> tuple[dict, bytes, str | None, str | None]:
    """Headers, body, and the name and UID tokens wrk fills in: a template when every request
    is a fresh job, else one job's event, the same every time (a job finished a minute ago)."""
    at = time.time() - 60
    if fresh:
        return event_template(state, at)
    headers, body = binary_event(realistic_tfjob(duplicate_name, "bench", state=state, at=at, uid=fresh_uid()))
    return headers, body, None, None


def run(workdir: Path, rounds: int, seconds: float, profile_dir: Path | None = None) -> RowResult:
    result = RowResult("sink", "Sink: events per second, jobttl vs a no-op Flask app under the same waitress")
    with RedisSide() as redis:
        sinks = Sinks(workdir, redis)
        try:
            result.facts["threads"] = sinks.threads
            result.facts["connections"] = sinks.threads
            for kind, (title, state, fresh, target) in KINDS.items():
                print(f"  {title}", flush=True)
                headers, body, name, uid = event_for(state, fresh, "duplicate-job")
                if not fresh:
                    for side in ("jobttl", "dedupe", "noop"):
                        answer = requests.post(sinks.url(side), headers=headers, data=body, timeout=10)
                        assert answer.status_code == 202, answer.text
                result.facts[f"{kind}_event_bytes"] = len(body)
                jobttl_side = result.side(f"jobttl {kind}", "events/s")
                noop_side = result.side(f"no-op {kind}", "events/s")
                # The opt-in memory only changes duplicates: measured on that row alone.
                dedupe_side = (
                    result.side(f"jobttl {kind}, dedupe {DEDUPE_SECONDS} s", "events/s") if not fresh else None
                )

                def measure(side_name: str, side) -> None:
                    script = wrk_script(
                        workdir / f"wrk-{kind}-{side_name}.lua",
                        headers,
                        body,
                        fresh,
                        prefix=next(_PREFIXES),
                        name=name,
                        uid=uid,
                    )
                    pid = sinks.processes[side_name].pid
                    before = redis.counters(pid)
                    out = wrk(sinks.url(side_name), script, seconds, sinks.threads)
                    after = redis.counters(pid)
                    if out["errors"]:
                        result.facts.setdefault("errors", []).append({side.name: out})
                    spent = after.minus(before)
                    ours = side_name != "noop"  # the no-op uses no Redis
                    rt = spent.round_trips / out["requests"] if ours else None
                    cmds = spent.commands / out["requests"] if ours else None
                    side.add(
                        out["rate"],
                        round_trips=rt,
                        commands=cmds,
                        p50_ms=out["p50_us"] / 1000,
                        p99_ms=out["p99_us"] / 1000,
                        sink_cpu_ms=1000 * spent.process_cpu / out["requests"],
                        redis_cpu_ms=1000 * spent.redis_cpu / out["requests"] if ours else None,
                    )
                    if side_name == "jobttl":
                        result.facts[f"{kind}_commands"] = {
                            k: round(v / out["requests"], 2) for k, v in sorted(spent.by_command.items())
                        }

                # Warm both up (imports, connection pools, Lua scripts loaded) outside the rounds.
                for side_name in ("jobttl", "noop") + (("dedupe",) if dedupe_side else ()):
                    wrk(
                        sinks.url(side_name),
                        wrk_script(workdir / "warm.lua", headers, body, fresh, next(_PREFIXES), name, uid),
                        1,
                        sinks.threads,
                    )
                sides = [
                    ("jobttl", lambda: measure("jobttl", jobttl_side)),
                    ("no-op", lambda: measure("noop", noop_side)),
                ]
                if dedupe_side is not None:
                    sides.append(("dedupe", lambda: measure("dedupe", dedupe_side)))
                interleave(rounds, sides)
                result.lines.append(Line(title, jobttl_side.name, noop_side.name, target))
                if dedupe_side is not None:
                    result.lines.append(
                        Line(
                            f"{title} (opt-in JOBTTL_SINK_DEDUPE_SECONDS={DEDUPE_SECONDS})",
                            dedupe_side.name,
                            noop_side.name,
                            "",
                        )
                    )
                if profile_dir is not None:
                    from bench.profile import profile_during

                    script = wrk_script(
                        workdir / f"wrk-{kind}-profile.lua", headers, body, fresh, next(_PREFIXES), name, uid
                    )
                    profile_during(
                        sinks.jobttl.pid,
                        profile_dir / f"sink-{kind}",
                        lambda: wrk(sinks.url("jobttl"), script, max(seconds, 5), sinks.threads),
                    )
        finally:
            sinks.stop()
    return result


def breakdown(workdir: Path, seconds: float) -> dict:
    """Round trips per event by call site (bench.counting), from a separate short run."""
    from bench import counting

    found = {}
    with RedisSide() as redis:
        out = workdir / "sink-counts"
        sinks = Sinks(workdir, redis, counting=out)
        try:
            for kind, (_title, state, fresh, _) in KINDS.items():
                headers, body, name, uid = event_for(state, fresh, "dup-count")
                if not fresh:
                    requests.post(sinks.url("jobttl"), headers=headers, data=body, timeout=10)
                time.sleep(1.2)
                before = counting.read(str(out))
                script = wrk_script(workdir / f"count-{kind}.lua", headers, body, fresh, next(_PREFIXES), name, uid)
                sent = wrk(sinks.url("jobttl"), script, seconds, sinks.threads)["requests"]
                time.sleep(1.2)  # the counts are written every 0.5 s
                after = counting.read(str(out))
                found[kind] = {
                    site: round((after[site] - before.get(site, 0)) / sent, 3)
                    for site in after
                    if after[site] - before.get(site, 0) > 0
                }
        finally:
            sinks.stop()
    return found


STEADY_RATE = 200  # events per second: a busy cluster's steady stream of job changes (issue 27 §2)
STEADY_CONNECTIONS = 4


def steady(workdir: Path, rounds: int, seconds: float, rate: int = STEADY_RATE) -> RowResult:
    """Row 13: the sink's latency under a steady stream (not its ceiling: rows 1-3), jobttl vs the no-op.

    wrk paces each of `STEADY_CONNECTIONS` keep-alive connections: after each answer it waits a
    pause, so each connection sends one request per (answer + pause). The pause is set per side from
    a warm-up's median answer, so that both sides are offered about `rate`; the rate reached is
    reported beside the latencies. New finished jobs, as in row 1: every event books a deletion.
    """
    result = RowResult("steady", f"Sink: p50 and p99 latency at a steady ~{rate} events/s, jobttl vs a no-op Flask app")
    period_ms = 1000 * STEADY_CONNECTIONS / rate  # each connection's time per request
    with RedisSide() as redis:
        sinks = Sinks(workdir, redis)
        try:
            result.facts.update(rate_asked=rate, connections=STEADY_CONNECTIONS, threads=sinks.threads)
            headers, body, name, uid = event_for("succeeded", True, "steady-job")
            result.facts["event_bytes"] = len(body)
            sides = {
                side: (
                    result.side(f"{side} p99", "ms (p99)", higher_is_better=False),
                    result.side(f"{side} p50", "ms (p50)", higher_is_better=False),
                )
                for side in ("jobttl", "no-op")
            }
            pauses: dict[str, int] = {}

            def url(side_name: str) -> str:
                return sinks.url("noop" if side_name == "no-op" else side_name)

            def script(side_name: str, label: str, pace_ms: int) -> Path:
                return wrk_script(
                    workdir / f"wrk-steady-{label}-{side_name}.lua",
                    headers,
                    body,
                    True,
                    prefix=next(_PREFIXES),
                    name=name,
                    uid=uid,
                    pace_ms=pace_ms,
                )

            for side_name in ("jobttl", "no-op"):  # warm up (imports, pools, Lua scripts), and set the pause
                warm = wrk(url(side_name), script(side_name, "warm", round(period_ms)), 3, STEADY_CONNECTIONS)
                pauses[side_name] = max(1, round(period_ms - warm["p50_us"] / 1000))
            result.facts["pause_ms"] = dict(pauses)

            def measure(side_name: str) -> None:
                out = wrk(url(side_name), script(side_name, "run", pauses[side_name]), seconds, STEADY_CONNECTIONS)
                if out["errors"]:
                    result.facts.setdefault("errors", []).append({side_name: out})
                p99, p50 = sides[side_name]
                p99.add(out["p99_us"] / 1000, rate=out["rate"])
                p50.add(out["p50_us"] / 1000, rate=out["rate"])

            interleave(rounds, [(side, lambda side=side: measure(side)) for side in ("jobttl", "no-op")])
            result.lines.append(Line(f"13. sink p99 at ~{rate} events/s", "jobttl p99", "no-op p99", ""))
            result.lines.append(Line(f"13. sink p50 at ~{rate} events/s", "jobttl p50", "no-op p50", ""))
        finally:
            sinks.stop()
    return result
