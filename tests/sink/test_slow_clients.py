"""Slow clients cost the sink a socket, not a thread: 50 of them, and events are still answered in 1 s.

Under gunicorn's gthread workers, eight connections that sent their headers and then trickled
the body held every thread: no legitimate event was answered for the whole attack. The sink
now runs on waitress (`jobttl.sink.server`), whose event loop buffers each request whole
before a thread sees it. Here 50 such connections (half trickling a byte a second, half gone
silent mid-body) stay open against the real sink process while events are sent, one after
another and a few at once: each must be answered within a second.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.fixtures import finished_status, tfjob, with_server_fields
from tests.services import RedisServer, start_sink

SLOW_CLIENTS = 50
ANSWER_BOUND = 1.0


def event() -> tuple[dict, bytes]:
    obj = with_server_fields(tfjob(f"j-{uuid.uuid4().hex[:8]}", "slow", ttl=3600))
    obj["status"] = finished_status(time.time())
    headers = {
        "ce-specversion": "1.0",
        "ce-id": str(uuid.uuid4()),
        "ce-source": "https://10.96.0.1",
        "ce-type": "dev.knative.apiserver.resource.update",
        "content-type": "application/json",
    }
    return headers, json.dumps(obj).encode()


def slow_connection(port: int) -> socket.socket:
    """Headers for a 100 KB event, and the first bytes of its body."""
    headers, body = event()
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(f"POST / HTTP/1.1\r\nHost: sink\r\n{head}Content-Length: 100000\r\n\r\n".encode() + body[:10])
    return sock


@pytest.fixture(scope="module")
def sink(tmp_path_factory):
    redis_server = RedisServer().start()
    process, url = start_sink(
        {"JOBTTL_REDIS_URL": redis_server.url, "JOBTTL_QUEUE": "slow"}, tmp_path_factory.mktemp("slow-logs")
    )
    yield process, url
    process.stop()
    redis_server.stop()


def test_fifty_slow_clients_do_not_delay_events_beyond_a_second(sink):
    process, url = sink
    port = int(url.rsplit(":", 1)[1])
    slow = [slow_connection(port) for _ in range(SLOW_CLIENTS)]
    trickling, _silent = slow[: SLOW_CLIENTS // 2], slow[SLOW_CLIENTS // 2 :]
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(1):
            for sock in trickling:
                sock.sendall(b" ")

    threading.Thread(target=trickle, daemon=True).start()
    session = requests.Session()  # one keep-alive connection for the events sent one by one

    def timed_post(client=requests) -> float:
        headers, body = event()
        started = time.monotonic()
        response = client.post(url, headers=headers, data=body, timeout=10)
        took = time.monotonic() - started
        assert response.status_code == 202 and response.headers["X-Jobttl-Outcome"] == "scheduled"
        return took

    try:
        one_by_one = [timed_post(session) for _ in range(20)]
        with ThreadPoolExecutor(8) as pool:
            at_once = list(pool.map(lambda _: timed_post(), range(16)))
        still_open = sum(1 for sock in slow if _open(sock))
    finally:
        stop.set()
        for sock in slow:
            sock.close()
    print(
        f"slow clients: {SLOW_CLIENTS} open; answers one by one max {max(one_by_one) * 1000:.0f} ms, "
        f"8 at once max {max(at_once) * 1000:.0f} ms"
    )
    assert still_open == SLOW_CLIENTS, "the attack lasted the whole test"
    assert max(one_by_one) < ANSWER_BOUND and max(at_once) < ANSWER_BOUND
    assert process.process.poll() is None


def _open(sock: socket.socket) -> bool:
    """Still connected: nothing to read yet, and not closed by the server."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)
