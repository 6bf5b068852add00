"""The review's and the held set's rules (jobttl.core.domain.decisions.review), table by table (issue 26 §2)."""

import pytest

from jobttl.core.domain.decisions.review import (
    Held,
    dropped_from_held,
    kind_key,
    listed_by_api_server,
    still_under_review,
)

TF, JOB, RAY = "kubeflow.org/v1/TFJob", "batch/v1/Job", "ray.io/v1/RayJob"


def test_a_kind_is_named_as_the_api_server_serves_it():
    assert kind_key("batch/v1", "Job") == JOB


@pytest.mark.parametrize(
    "by, listed",
    [
        ("first-run", True),  # a resync's listing, or a worker's re-read
        ("resync", True),  # a resync over the thresholds
        ("worker", True),  # a worker's burst, after it read the object
        ("event", False),  # the sink's burst guard: an event's word alone
    ],
)
def test_only_what_the_api_server_returned_is_in_the_held_id(by, listed):
    assert listed_by_api_server(by) is listed


@pytest.mark.parametrize(
    "before, listed, left",
    [
        (None, {TF, JOB, RAY}, set()),  # every kind listed: the review ends
        (None, {TF, RAY}, {JOB}),  # the Job list answered 404, 403 or 500: Jobs stay under review
        (None, set(), {TF, JOB, RAY}),  # nothing listed: nothing covered
        (frozenset({JOB}), {JOB}, set()),  # the kind left over, listed now
        (frozenset({JOB}), {TF}, {JOB}),  # still not listed
        (frozenset(), {TF}, set()),  # reviewed already: no kind comes back
    ],
)
def test_a_confirmation_covers_only_the_kinds_listed_completely(before, listed, left):
    assert still_under_review(before, {TF, JOB, RAY}, listed) == left


@pytest.mark.parametrize(
    "held, seen, listed, dropped",
    [
        ([Held("u1", "u1", TF, "first-run")], {"u1"}, {TF}, set()),  # listed: stays
        ([Held("u1", "u1", TF, "event")], set(), {TF}, {"u1"}),  # a forged event's: never there
        ([Held("u1", "u1", TF, "first-run")], set(), {TF}, {"u1"}),  # deleted since it was held
        ([Held("u1", "u1", JOB, "event")], set(), {TF}, set()),  # its kind not listed: nothing known
        ([Held("pods:u1", "u1", TF, "resync")], {"u1"}, {TF}, set()),  # a pods stage of a listed job
    ],
)
def test_a_held_deletion_whose_object_the_listing_did_not_return_is_dropped(held, seen, listed, dropped):
    assert dropped_from_held(held, seen, listed) == dropped
