"""Read ahead: the next item of a slow iterator is fetched while the caller works on this one.

A resync lists a kind a page at a time and reconciles each page before asking for the next,
so the API server (serializing the next 500 objects) and jobttl (reconciling this page's)
took turns: the listing's wall time plus the reconcile's. With one page read ahead by a
thread they overlap, and a resync's wall time comes near the larger of the two. The pages
are fetched in order by the one thread (a page's continue token names the next), at most
`ahead` beyond the one the caller holds (fetched or being fetched), so memory stays bounded:
with `ahead=1`, two pages.

What the iterator raises reaches the caller where that item would have: an error listing
page 3 is raised after pages 1 and 2 were handed over. A caller that stops early (an
exception of its own, a break, `close()`) stops the thread before its next item; one already
being fetched (a LIST under way) is finished and dropped, and the source is closed (a
generator closed before its first item never starts the thread, nor touches the source).
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
    if ahead < 1:
        raise ValueError(f"ahead must be at least 1, got {ahead}")
    handed: queue.Queue = queue.Queue()
    slots = threading.Semaphore(ahead)  # one per item fetched and not yet taken by the caller
    stop = threading.Event()

    def slot() -> bool:
        while not stop.is_set():
            if slots.acquire(timeout=_POLL):
                return not stop.is_set()
        return False

    def read() -> None:
        source = None
        try:
            source = iter(items)
            while slot():
                try:
                    item = next(source)
                except StopIteration:
                    handed.put(_END)
                    return
                handed.put(item)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised there
            handed.put(_Raised(exc))
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
            slots.release()  # the caller holds this one now: the reader may fetch the next
            yield item
    finally:
        stop.set()
