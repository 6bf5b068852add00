"""The archived log tails, end to end over HTTP: the worker's own Archiver (as `jobttl worker` builds
it from a policy that archives) reads pods' logs from the emulator with the real kubernetes
client, and writes them to a directory store. What is kept is checked against numbers worked
out by hand (tests.fixtures.expected_kept), never against the code's own trim.

Issue 18: with `logKiB: 16` and lines of 68 bytes the archive kept 8,704 bytes; lines of 1 KiB
and more (with `logKiB: 1`) kept 1,024 bytes from the middle of the last line, not its end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jobttl.core.domain.decisions import archive
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.registry import TFJOB
from tests.fixtures import expected_kept, uniform_log
from tests.worker.bench import Bench, kube  # noqa: F401  (kube: the module's emulator)

LINE_BYTES = (16, 68, 130, 500, 5000)


@pytest.fixture
def bench(kube, redis_server, tmp_path, queue_name):
    policy = f"ttl: 1h\narchive:\n  store: {tmp_path / 'archive'}\n"
    return Bench(kube, redis_server, tmp_path, policy, queue_name)


def archive_logs(bench: Bench, name: str, logs: dict[str, bytes], log_kib: int) -> tuple[Path, dict]:
    """A finished job with one pod per log; archived as the worker does before a DELETE."""
    obj = bench.job(name, time.time() - 60)
    for pod, text in logs.items():
        bench.pod(pod, obj)
        bench.kube.set_log(bench.namespace, pod, "tensorflow", text.decode())
    assert bench.ctx.archiver is not None, "the policy archives: the worker has an archiver"
    ref = JobRef.of(obj)
    bench.ctx.archiver.write(TFJOB, ref, obj, archive.ArchivePlan(log_kib=log_kib), "job", time.time())
    folder = Path(bench.ctx.archiver.store.location(archive.folder(ref)))
    return folder, json.loads((folder / archive.INDEX).read_bytes())


def log_requests(bench: Bench, pod: str) -> list[dict]:
    return bench.kube.requests("GET", path_contains=f"/namespaces/{bench.namespace}/pods/{pod}/log")


def test_the_archive_keeps_at_least_the_last_n_kib_whatever_the_lines_length(bench):
    keep = 16 * 1024
    logs = {f"lines-{n}": uniform_log(n, 200 * 1024) for n in LINE_BYTES}
    folder, index = archive_logs(bench, "tails", logs, log_kib=16)
    entries = {e["pod"]: e for e in index["logs"]}
    for pod, log in logs.items():
        line_bytes = int(pod.split("-")[1])
        kept = (folder / "logs" / pod / "tensorflow.log").read_bytes()
        # The whole lines covering the last 16 KiB: 16,384 (16), 16,388 (68), 16,510 (130),
        # 16,500 (500), 20,000 (5,000) bytes.
        assert len(kept) == expected_kept(line_bytes, keep) >= keep, pod
        assert log.endswith(kept) and log[-len(kept) - 1 : -len(kept)] == b"\n", f"{pod}: whole lines, the log's end"
        assert entries[pod]["bytes"] == len(kept) and entries[pod]["truncated"] is True
        # The first answer (16,384 lines, capped at 64 KiB) is cut; the second is sized from it.
        asked = log_requests(bench, pod)
        assert len(asked) == 2, f"{pod}: {[r['path'] for r in asked]}"


def test_a_log_shorter_than_n_kib_is_kept_whole_after_one_request(bench):
    logs = {"short": uniform_log(68, 16 * 1024 - 68), "tiny": b"done, no newline", "nothing": b""}
    folder, index = archive_logs(bench, "short", logs, log_kib=16)
    entries = {e["pod"]: e for e in index["logs"]}
    for pod, log in logs.items():
        assert (folder / "logs" / pod / "tensorflow.log").read_bytes() == log
        assert entries[pod]["bytes"] == len(log) and entries[pod]["truncated"] is False
        assert len(log_requests(bench, pod)) == 1


def test_lines_longer_than_n_kib_keep_exactly_the_last_n_kib(bench):
    keep = 1024
    logs = {
        "lines-5000": uniform_log(5000, 100_000),
        # One line longer than the cap (4 KiB): no count of lines fits under it, so the last
        # request streams that line uncapped and keeps only its end.
        "one-long-line": b"start\n" + b"".join(b"%07d " % i for i in range(20_000)) + b"\n",
    }
    folder, index = archive_logs(bench, "long", logs, log_kib=1)
    for pod, log in logs.items():
        kept = (folder / "logs" / pod / "tensorflow.log").read_bytes()
        assert kept == log[-keep:], pod
        asked = log_requests(bench, pod)
        assert 2 <= len(asked) <= archive.MAX_LOG_TRIES + 1
        assert "limitBytes" not in asked[-1]["query"] and asked[-1]["query"]["tailLines"] == "1"


def test_a_cut_line_keeps_whole_characters(bench):
    log = ("é" * 30_000 + "\n").encode()  # 60,001 bytes of one line, two bytes a character
    folder, _ = archive_logs(bench, "utf8", {"accents": log}, log_kib=1)
    kept = (folder / "logs" / "accents" / "tensorflow.log").read_bytes()
    assert kept.decode() == "é" * 512 + "\n" and len(kept) == 1025  # 1,024 bytes start mid-character


def test_lines_the_runtime_splits_still_keep_the_last_n_kib_in_whole_lines(bench):
    """Lines of 20,000 bytes are two log-file entries each (16 KiB, then the rest), and tailLines
    counts entries: the last 16 KiB still come as the whole last line."""
    keep = 16 * 1024
    log = uniform_log(20_000, 200_000)
    folder, index = archive_logs(bench, "split", {"lines-20000": log}, log_kib=16)
    kept = (folder / "logs" / "lines-20000" / "tensorflow.log").read_bytes()
    assert kept == log[-20_000:] and len(kept) == expected_kept(20_000, keep)
    assert index["logs"][0]["truncated"] is True
    assert len(log_requests(bench, "lines-20000")) <= archive.MAX_LOG_TRIES + 1
