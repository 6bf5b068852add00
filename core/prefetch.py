"""Read ahead: the next item of a slow iterator is fetched while the caller works on this one.

A resync lists a kind a page at a time and reconciles each page before asking for the next,
so the API server (serializing the next 500 objects) and jobttl (reconciling this page's)
took turns: the listing's wall time plus the reconcile's. With one page read ahead by a
thread they overlap, and a resync's wall time comes near the larger of the two. The pages
are fetched in order by the one thread (a page's continue token names the next), at most
`ahead` beyond the one the caller holds, so memory stays bounded by a few pages.

What the iterator raises reaches the caller where that item would have: an error listing
page 3 is raised after pages 1 and 2 were handed over. A caller that stops early (an
exception of its own, a break) closes the iterator, and the thread stops at its next item.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

_END = object()
_POLL = 0.5  # seconds between the reader's looks at whether the caller went away


class _Raised:
    def __init__(self, exc: BaseException):
        self.exc = exc


def prefetched(items: Iterable[T], ahead: int = 1, name: str = "prefetch") -> Iterator[T]:
    """`items`, in order, with up to `ahead` of them fetched before the caller asks."""
    handed: queue.Queue = queue.Queue(maxsize=ahead)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                handed.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        source = iter(items)
        try:
            for item in source:
                if not put(item):
                    return
            put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised there
            put(_Raised(exc))
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    reader = threading.Thread(target=read, name=name, daemon=True)
    reader.start()
    try:
        while True:
            item = handed.get()
            if item is _END:
                return
            if isinstance(item, _Raised):
                raise item.exc
            yield item
    finally:
        stop.set()
