"""`jobttl.io/keep` fails closed, and a `jobttl.io/` key jobttl does not know keeps the job (issue 26 §3): the
sink process decides from the event, the worker process's re-read decides the same, and the worker posts
one Warning Event per object and value (InvalidKeep, UnknownKey) from the notices outbox. CloudEvents over
HTTP, real Redis, the emulator read with the kubernetes client."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import Cluster
from tests.e2e.test_invalid_ttl import events, sent, settled
from tests.services import wait_for

# The worker posts the outbox's notices at most 10 a second, oldest first, while every other test of
# the shared stack writes its own: on a loaded machine a notice may wait. An upper bound, not a window.
WAIT = 60
KEEP_YES = (
    'annotation jobttl.io/keep is \'yes\', neither "true" nor "false": jobttl keeps this TFJob, as for any '
    'value but "false" (write "true" to keep it, "false" or no annotation to let it expire)'
)
KEPP = (
    "annotation jobttl.io/kepp is not a key jobttl knows (did you mean annotation jobttl.io/keep?): jobttl keeps "
    "this TFJob until it is fixed or removed"
)


def finished_with(cluster: Cluster, name: str, **annotations: str) -> dict:
    """A TFJob that finished a minute ago and asks to go at once, with these annotations."""
    cluster.create_finished(name, ttl=0, finished_at=time.time() - 60)
    return cluster.patch(name, {"metadata": {"annotations": annotations}})


@pytest.mark.parametrize("value", ["yes", "1", "true ", "TRUE", "False", ""])
def test_any_keep_value_but_false_keeps_the_job(cluster, worker, value):
    """Before issue 26, "yes", "1" and "true " were ignored and the job expired."""
    obj = finished_with(cluster, "kept", **{"jobttl.io/keep": value})
    sent(cluster, obj, "ignored:kept")
    wait_for(lambda: events(cluster, obj, "InvalidKeep"), timeout=WAIT, what="the InvalidKeep Event")
    assert cluster.get("kept") is not None


def warned_once(cluster: Cluster, name: str, reason: str, message: str, **annotations: str) -> dict:
    """A job kept for `annotations`: its events, however many, get one Warning `reason` saying `message`."""
    obj = finished_with(cluster, name, **annotations)
    sent(cluster, obj, "ignored:kept")
    sent(cluster, obj, "ignored:kept")
    [warning] = wait_for(lambda: events(cluster, obj, reason), timeout=WAIT, what=f"the {reason} Event")
    assert (warning.type, warning.message) == ("Warning", message)
    sent(cluster, obj, "ignored:kept", mode="ref")
    settled(cluster, f"{name}-marker", WAIT)
    assert len(events(cluster, obj, reason)) == 1 and cluster.get(name) is not None
    return obj


def test_an_unrecognised_keep_value_is_warned_once_per_value(cluster, worker):
    obj = warned_once(cluster, "yes", "InvalidKeep", KEEP_YES, **{"jobttl.io/keep": "yes"})
    obj = cluster.patch("yes", {"metadata": {"annotations": {"jobttl.io/keep": "1"}}})
    sent(cluster, obj, "ignored:kept")
    wait_for(lambda: len(events(cluster, obj, "InvalidKeep")) == 2, timeout=WAIT, what="the new value's Event")
    obj = cluster.patch("yes", {"metadata": {"annotations": {"jobttl.io/keep": "true"}}})
    sent(cluster, obj, "ignored:kept")
    settled(cluster, "marker-2", WAIT)
    assert len(events(cluster, obj, "InvalidKeep")) == 2 and cluster.get("yes") is not None


def test_only_false_lets_the_job_expire(cluster, worker):
    obj = finished_with(cluster, "go", **{"jobttl.io/keep": "false"})
    sent(cluster, obj, "scheduled")
    cluster.wait_gone("go", timeout=WAIT)
    assert events(cluster, obj, "InvalidKeep") == []


def test_an_unknown_jobttl_key_keeps_the_job_and_names_the_nearest_known_key(cluster, worker):
    warned_once(cluster, "typo", "UnknownKey", KEPP, **{"jobttl.io/kepp": "true"})


def test_the_worker_s_re_read_keeps_what_the_sink_booked_before_the_keep_was_written(cluster, worker):
    """Booked from an event, then annotated with no event reaching the sink: the worker's re-read at the
    due time reaches the sink's decision, keeps the job, cancels the deletion and warns its owner."""
    cluster.create_finished("late", ttl=5, finished_at=time.time())
    obj = cluster.get("late")
    sent(cluster, obj, "scheduled")
    obj = cluster.patch("late", {"metadata": {"annotations": {"jobttl.io/keep": "yes"}}})
    [warning] = wait_for(
        lambda: events(cluster, obj, "InvalidKeep"), timeout=WAIT, what="the worker's InvalidKeep Event"
    )
    assert warning.message == KEEP_YES
    assert cluster.get("late") is not None
    history = [e.as_dict() for e in cluster.audit.history(cluster.namespace, "late")]
    assert ("cancelled", "kept", KEEP_YES) in {(e["event"], e.get("reason"), e.get("detail")) for e in history}, history
