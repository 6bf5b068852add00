"""Row 11: N finished TFJobs in 1,000 namespaces booked from events, then resynced, against plain RQ.

The emulator holds N finished realistic TFJobs (~10.5 KB), spread over 1,000 namespaces, due in
a day. Each round, into empty Redis servers (the shipped flags):

- jobttl: ``python -m jobttl sink`` (the product's command, its defaults) receives one binary
  ApiServerSource ``update`` CloudEvent per object, the very objects the emulator holds, from 4
  keep-alive connections; measured: the wall time and rate, and the growth of Redis's
  ``used_memory`` per pending deletion (less the capped audit stream, as row 5), with where it
  goes by key; then ``python -m jobttl resync --json`` over the same objects (nothing to change);
- plain RQ: ``enqueue_at`` of the same N deletions (bench.baseline_tasks) into its own Redis,
  one by one as an application would, timed and measured the same way; and the bare paged LIST
  of the same objects with the official client (bench.baseline_list), the resync's baseline.

The per-key figures include the DeletionScheduled outbox entry (``other``), which a worker
drains within seconds (no worker runs here): the row also gives the steady state without it.

    python -m bench.booking [--n 100000] [--rounds 1]
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from redis import Redis
from rq import Queue

from bench.emulator_host import Emulator
from bench.harness import Line, RowResult, interleave, python, run_measured, spawn, stop
from bench.memory import usage_by_group
from bench.objects import binary_event, realistic_tfjob
from bench.redis_side import RedisSide
from bench.worker import BASELINE_TASK, QUEUE
from jobttl.core.store import keys
from jobttl_emulator.localstack import free_port
from tests.services import wait_for

NAMESPACES = 1000
TTL = 86400
SENDERS = 4
TARGET = "<= 1.3"
_NAME, _NAMESPACE, _UID = "benchname-placeholder", "benchns-placeholder", "00000000-0000-4000-8000-0000deadbeef"


def _template(at: float) -> tuple[dict[str, str], str]:
    obj = realistic_tfjob(_NAME, _NAMESPACE, state="succeeded", at=at, ttl=TTL, uid=_UID)
    headers, body = binary_event(obj, "update")
    return headers, body.decode()


def _fill(text: str, namespace: str, name: str, uid: str, rv: str) -> str:
    return (
        text.replace(_NAME, name)
        .replace(_NAMESPACE, namespace)
        .replace(_UID, uid)
        .replace('"resourceVersion":"48151623"', f'"resourceVersion":"{rv}"')
    )


def send_events(port: int, refs: list[list[str]], at: float) -> tuple[float, int]:
    """POST one event per ref over SENDERS keep-alive connections; (seconds, non-202 answers)."""
    headers, body = _template(at)
    headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
    failures = [0]
    lock = threading.Lock()

    def sender(part: list[list[str]]) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        bad = 0
        for i, (namespace, name, uid, rv) in enumerate(part):
            sent = {k: _fill(v, namespace, name, uid, rv) for k, v in headers.items()}
            sent["ce-id"] = f"{uid}-{i}"
            connection.request("POST", "/", body=_fill(body, namespace, name, uid, rv).encode(), headers=sent)
            answer = connection.getresponse()
            answer.read()
            bad += answer.status != 202
        connection.close()
        with lock:
            failures[0] += bad

    threads = [threading.Thread(target=sender, args=(refs[i::SENDERS],)) for i in range(SENDERS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, failures[0]


def run(workdir: Path, rounds: int, n: int) -> RowResult:
    result = RowResult("booking", f"{n:,} finished TFJobs in {NAMESPACES:,} namespaces booked from events")
    emulator = Emulator(str(workdir))
    redis = {"jobttl": RedisSide().start(), "baseline": RedisSide().start()}
    sink_port = free_port()
    env = {
        "JOBTTL_REDIS_URL": redis["jobttl"].url,
        "JOBTTL_QUEUE": QUEUE,
        "KUBECONFIG": emulator.kubeconfig,
        "JOBTTL_RESYNC_MAX_DELETIONS": str(n),
        "JOBTTL_RESYNC_INTERVAL": "0",
        "JOBTTL_FIRST_RUN_REVIEW": "off",
    }
    sink = None
    try:
        at = time.time() - 600
        started = time.perf_counter()
        seeded = emulator.seed(
            n, "done", "succeeded", at, TTL, namespaces=NAMESPACES, namespace="team", return_refs=True
        )
        result.facts["seed_seconds"] = round(time.perf_counter() - started, 1)
        refs = seeded["refs"]
        # The resourceVersions the emulator gave them: read back once (a LIST), so events carry them.
        versions = _resource_versions(emulator)
        refs = [[ns, name, uid, versions[uid]] for ns, name, uid in refs]

        def jobttl() -> None:
            nonlocal sink
            side = redis["jobttl"]
            side.flush()
            # Started on the empty Redis, as in a new install: it writes the layout's version and
            # loads its scripts before the measurement starts (a Redis emptied under a running
            # sink would have the resync upgrade it, which is not what this row measures).
            sink = spawn(
                python("-m", "jobttl", "sink", "--host", "127.0.0.1", "--port", str(sink_port)),
                env,
                workdir / "booking-sink.log",
            )
            wait_for(lambda: _answers(sink_port), timeout=60, what="the jobttl sink")
            client = side.client
            client.execute_command("MEMORY", "PURGE")
            before = client.info("memory")["used_memory"]
            seconds, bad = send_events(sink_port, refs, at)
            after = client.info("memory")["used_memory"]
            stop(sink)
            sink = None
            pending = client.zcard(keys.PENDING_INDEX)
            assert bad == 0 and pending == n, f"{bad} events refused, {pending} of {n} pending: see the sink's log"
            sizes, counts = usage_by_group(client)
            audit = sizes.pop("audit stream", 0)
            outbox = sizes.get("other", 0)
            per = (after - before - audit) / n
            result.side("jobttl sink: booking", "events/s").add(n / seconds)
            result.side("jobttl: Redis per pending deletion", "B/pending", False).add(per)
            result.side("jobttl: Redis per pending deletion, outbox drained", "B/pending", False).add(per - outbox / n)
            result.facts["jobttl: bytes per pending deletion by key"] = {g: round(s / n) for g, s in sizes.items()}
            result.facts["jobttl: keys per pending deletion"] = {g: round(c / n, 3) for g, c in counts.items()}
            usage = run_measured(
                python("-m", "jobttl", "resync", "--json"),
                env,
                workdir / "booking-resync.log",
                stdout=workdir / "booking-resync.out",
            )
            assert usage.returncode == 0, f"the resync exited {usage.returncode}: see {workdir / 'booking-resync.log'}"
            report = json.loads(Path(workdir / "booking-resync.out").read_text())
            if report.get("unchanged") != n:
                result.facts.setdefault("unexpected resync reports", []).append(report)
            result.side("jobttl resync over them, wall", "s", False).add(usage.wall)
            result.side("jobttl resync over them, peak RSS", "MB", False).add(usage.maxrss_mb)
            Path(workdir / "booking-resync.out").write_text("")

        def baseline() -> None:
            side = redis["baseline"]
            side.flush()
            client = side.client
            client.execute_command("MEMORY", "PURGE")
            before = client.info("memory")["used_memory"]
            queue = Queue(QUEUE, connection=Redis.from_url(side.url))
            when = datetime.fromtimestamp(int(at + TTL), tz=timezone.utc)
            started = time.perf_counter()
            for namespace, name, uid, _ in refs:
                queue.enqueue_at(when, BASELINE_TASK, namespace, name, uid)
            seconds = time.perf_counter() - started
            after = client.info("memory")["used_memory"]
            result.side("plain RQ enqueue_at: booking", "deletions/s").add(n / seconds)
            result.side("plain RQ enqueue_at: Redis per pending deletion", "B/pending", False).add((after - before) / n)
            usage = run_measured(python("-m", "bench.baseline_list", "client"), env, workdir / "booking-list.log")
            result.side("bare paged LIST, wall", "s", False).add(usage.wall)
            result.side("bare paged LIST, peak RSS", "MB", False).add(usage.maxrss_mb)

        interleave(
            rounds,
            [
                (f"jobttl: {n:,} events to the sink, then a resync", jobttl),
                (f"plain RQ: {n:,} enqueue_at, then the bare LIST", baseline),
            ],
        )
    finally:
        if sink is not None:
            stop(sink)
        emulator.stop()
        for side in redis.values():
            side.stop()
    title = f"11. {n:,} finished jobs in {NAMESPACES:,} namespaces booked from events"
    result.lines += [
        Line(f"{title}: booking rate", "jobttl sink: booking", "plain RQ enqueue_at: booking"),
        Line(
            f"{title}: Redis memory per pending deletion",
            "jobttl: Redis per pending deletion",
            "plain RQ enqueue_at: Redis per pending deletion",
            TARGET,
        ),
        Line(
            f"{title}: Redis memory per pending deletion, outbox drained",
            "jobttl: Redis per pending deletion, outbox drained",
            "plain RQ enqueue_at: Redis per pending deletion",
            TARGET,
        ),
        Line(
            f"{title}: the resync over them (nothing to change), wall",
            "jobttl resync over them, wall",
            "bare paged LIST, wall",
            "<= 1.3",
        ),
        Line(
            f"{title}: the resync over them, peak RSS", "jobttl resync over them, peak RSS", "bare paged LIST, peak RSS"
        ),
    ]
    return result


def _answers(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False


def _resource_versions(emulator: Emulator) -> dict[str, str]:
    from kubernetes import client, config

    api = client.CustomObjectsApi(config.new_client_from_config(config_file=emulator.kubeconfig))
    found, token = {}, None
    while True:
        page = api.list_cluster_custom_object("kubeflow.org", "v1", "tfjobs", limit=500, _continue=token)
        found.update((o["metadata"]["uid"], o["metadata"]["resourceVersion"]) for o in page["items"])
        token = page["metadata"].get("continue")
        if not token:
            return found


if __name__ == "__main__":
    import argparse
    import tempfile

    from bench import harness

    parser = argparse.ArgumentParser(prog="python -m bench.booking", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", help="write the row's JSON here")
    args = parser.parse_args()
    row = run(Path(tempfile.mkdtemp(prefix="jobttl-bench-booking-")), args.rounds, args.n)
    print(harness.table([row]))
    if args.out:
        Path(args.out).write_text(json.dumps(row.as_dict(), indent=1, default=str) + "\n")
