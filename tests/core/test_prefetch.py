"""Read-ahead (jobttl.core.kube.prefetch): the order, the errors and the bound of what is fetched early."""

from __future__ import annotations

import threading
import time
from contextlib import closing

import pytest

from jobttl.core.kube.prefetch import prefetched


def _wait(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_items_arrive_in_order_and_all_of_them():
    assert list(prefetched(iter(range(1000)))) == list(range(1000))


def test_an_error_is_raised_where_its_item_would_have_been():
    def pages():
        yield 1
        yield 2
        raise RuntimeError("listing page 3 failed")

    got = []
    with pytest.raises(RuntimeError, match="page 3"):
        for page in prefetched(pages()):
            got.append(page)
    assert got == [1, 2]


def test_the_next_item_is_fetched_while_the_caller_works_on_this_one():
    fetched = []

    def pages():
        for n in range(5):
            fetched.append(n)
            yield n

    with closing(prefetched(pages())) as ahead:
        assert next(ahead) == 0
        _wait(lambda: len(fetched) >= 2)  # page 1 is fetched while the caller holds page 0


def test_no_more_than_ahead_items_are_fetched_beyond_the_callers():
    fetched = []

    def pages():
        for n in range(100):
            fetched.append(n)
            yield n

    with closing(prefetched(pages(), ahead=2)) as ahead:
        assert next(ahead) == 0
        _wait(lambda: len(fetched) >= 3)
        time.sleep(0.2)  # give a reader that ignored its bound the time to run on
        assert len(fetched) == 3, "the caller's item and two ahead, no more"
        assert next(ahead) == 1
        _wait(lambda: len(fetched) >= 4)
        time.sleep(0.2)
        assert len(fetched) == 4


def test_a_caller_that_stops_early_stops_the_reader_and_closes_the_source():
    closed = threading.Event()

    def pages():
        try:
            n = 0
            while True:
                yield n
                n += 1
        finally:
            closed.set()

    with closing(prefetched(pages())) as ahead:
        assert next(ahead) == 0
    assert closed.wait(5), "the source was not closed after the caller went away"


def test_a_source_that_cannot_be_iterated_is_an_error_for_the_caller_not_a_hang():
    class NotIterable:
        def __iter__(self):
            raise TypeError("no pages here")

    with pytest.raises(TypeError, match="no pages"):
        list(prefetched(NotIterable()))


def test_a_caller_that_raises_stops_the_reader():
    closed = threading.Event()

    def pages():
        try:
            yield from range(10**9)
        finally:
            closed.set()

    with pytest.raises(KeyError):
        with closing(prefetched(pages())) as ahead:
            for _ in ahead:
                raise KeyError("the caller failed")
    assert closed.wait(5)
