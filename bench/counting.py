"""Run a Python program with every Redis round trip it makes counted, by where it was made.

    python -m bench.counting OUT.json -m jobttl sink ...     (like `python -m jobttl sink ...`)
    python -m bench.counting OUT.json path/to/script.py ...

Only the benchmark does this (tests never patch redis-py): it wraps redis-py's
``Connection.send_packed_command``, which every command, pipeline, MULTI/EXEC and EVALSHA
goes through exactly once, then waits for its reply. So one call is one round trip. Each is
filed under the first frame outside redis-py and RQ that is jobttl's (or the benchmark's)
code, and under the RQ function that made it, if any. Counts are written to OUT.json (one
file per process id: RQ's scheduler child counts separately) every half second and at exit.
This is the breakdown behind the table's round-trip column, which Redis itself counts.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import threading
from collections import Counter

_counts: Counter = Counter()
_lock = threading.Lock()
_writer_pid: int | None = None
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + "/"


def _site() -> str:
    frame = sys._getframe(2)
    rq_site = None
    while frame is not None:
        path = frame.f_code.co_filename
        if "/site-packages/rq/" in path and rq_site is None:
            rq_site = f"rq/{path.rsplit('/site-packages/rq/', 1)[1]}:{frame.f_code.co_name}"
        elif path == __file__:  # a request made while sending one: the connection's handshake
            return "(connecting: HELLO, CLIENT SETINFO)"
        elif path.startswith(_ROOT) and "/site-packages/" not in path:
            own = f"{path[len(_ROOT) :]}:{frame.f_code.co_name}"
            return f"{own} via {rq_site}" if rq_site else own
        frame = frame.f_back
    return rq_site or "elsewhere"


def _dump(out: str) -> None:
    with _lock:
        data = dict(_counts)
    path = f"{out}.{os.getpid()}"
    with open(path + ".tmp", "w") as fh:
        json.dump(data, fh)
    os.replace(path + ".tmp", path)


def _start_writer(out: str) -> None:
    global _writer_pid
    if _writer_pid == os.getpid():
        return
    _writer_pid = os.getpid()
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.5):
            _dump(out)

    threading.Thread(target=loop, daemon=True, name="bench-counting").start()
    atexit.register(_dump, out)


def install(out: str) -> None:
    from redis.connection import AbstractConnection

    original = AbstractConnection.send_packed_command

    def counted(self, command, check_health=True):
        site = _site()
        with _lock:
            _counts[site] += 1
        _start_writer(out)  # also in a forked child (RQ's scheduler), which has no writer thread yet
        return original(self, command, check_health)

    AbstractConnection.send_packed_command = counted


def read(out: str) -> Counter:
    """The counts of every process that ran under `out`."""
    total: Counter = Counter()
    directory, prefix = os.path.split(out)
    for name in os.listdir(directory or "."):
        if name.startswith(os.path.basename(prefix) + ".") and name.split(".")[-1].isdigit():
            with open(os.path.join(directory, name)) as fh:
                total.update(json.load(fh))
    return total


def main() -> None:
    out, *argv = sys.argv[1:]
    install(out)
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
