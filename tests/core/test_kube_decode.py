"""Decoding list pages (jobttl.core.kube.client): the collector is paused for a page, and back after."""

import gc
import threading

import orjson

from jobttl.core.kube.client import _collector_paused, _page


def page_of(n: int) -> bytes:
    item = {
        "metadata": {"name": "x", "labels": {f"l{i}": str(i) for i in range(20)}},
        "spec": {"replicas": [{"args": [str(i) for i in range(20)]} for _ in range(5)]},
    }
    return orjson.dumps({"metadata": {"resourceVersion": "1"}, "items": [item] * n})


def collections_during(action) -> int:
    seen = []
    callback = lambda phase, info: seen.append(phase) if phase == "start" else None  # noqa: E731
    gc.callbacks.append(callback)
    try:
        action()
    finally:
        gc.callbacks.remove(callback)
    return len(seen)


def test_a_page_is_decoded_without_collections_and_the_collector_is_back_on():
    body = page_of(2000)  # some 500,000 containers: hundreds of collections if the collector ran
    assert gc.isenabled()
    pages = []
    assert collections_during(lambda: pages.append(_page(body))) <= 1, "one, once it is back on"
    assert len(pages[0].items) == 2000 and gc.isenabled()


def test_a_collector_someone_else_turned_off_stays_off():
    gc.disable()
    try:
        _page(page_of(10))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_decodes_turn_the_collector_on_when_the_last_is_done():
    first_in, second_done = threading.Event(), threading.Event()

    def first():
        with _collector_paused():
            first_in.set()
            second_done.wait(10)
            assert not gc.isenabled(), "the second decode finishing must not turn it on under the first"

    thread = threading.Thread(target=first)
    thread.start()
    assert first_in.wait(10)
    with _collector_paused():
        pass
    second_done.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_child_forked_during_a_decode_has_its_collector_on():
    """RQ forks its scheduler from the main thread while another thread may be decoding."""
    import os

    with _collector_paused():
        pid = os.fork()
        if pid == 0:
            os._exit(0 if gc.isenabled() else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and gc.isenabled()
