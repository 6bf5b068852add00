"""The public shapes of stored entries (jobttl.core.domain.wire.shapes): typed values, RFC 3339 times, plain errors."""

import pytest

from jobttl.core.kube.client import PermanentApiError
from jobttl.core.services.operations import NotFound
from jobttl.core.domain.wire.shapes import describe, entry, plain_error, rfc3339, typed, with_times

# An entry as Redis holds it: every value a string.
STORED = {
    "event": "delete-requested",
    "kind": "TFJob",
    "namespace": "team-a",
    "name": "20",
    "uid": "u",
    "due": "1796121233",
    "ttl": "20",
    "lateness": "0.25",
    "dryRun": "false",
    "rules": '["short-lived"]',
    "retriesLeft": "0",
    "wasStuck": "true",
    "reason": "123",
    "ttlSource": "policy",
}


def test_stored_strings_get_their_types_back_and_other_fields_stay_strings():
    assert typed(STORED) == {
        **STORED,
        "due": 1796121233,
        "ttl": 20,
        "lateness": 0.25,
        "dryRun": False,
        "rules": ["short-lived"],
        "retriesLeft": 0,
        "wasStuck": True,
    }
    assert typed(STORED)["name"] == "20" and typed(STORED)["reason"] == "123", "a name made of digits is a name"


def test_an_empty_list_written_by_lua_as_an_object_is_a_list_and_an_object_an_object():
    assert typed({"rules": "{}", "pods": "[]"}) == {"rules": [], "pods": []}
    assert typed({"install": '{"origin": "first-install"}'}) == {"install": {"origin": "first-install"}}
    assert typed({"install": "[]"}) == {"unparsed": {"install": "[]"}}


def test_a_value_not_of_its_type_is_kept_as_written_apart_never_passed_off_as_its_type():
    shown = typed(
        {
            "event": "scheduled",
            "due": "soon",
            "ttl": "12.5",
            "dryRun": "maybe",
            "rules": '"x"',
            "lateness": "NaN",
            "duration": "3.0",
        }
    )
    assert shown == {
        "event": "scheduled",
        "duration": 3.0,
        "unparsed": {"due": "soon", "ttl": "12.5", "dryRun": "maybe", "rules": '"x"', "lateness": "NaN"},
    }
    assert typed({"ttl": "12.0"}) == {"ttl": 12}, "an older writer's float that is whole"


def test_every_time_gets_an_rfc3339_twin_right_after_it():
    shown = entry(
        {"event": "moved", "due": "1796121233", "previousDue": "1796121200", "by": "operator"},
        id="1796121000123-0",
        at=1796121000.123,
    )
    assert list(shown) == ["id", "at", "atTime", "event", "due", "dueTime", "previousDue", "previousDueTime", "by"]
    assert (shown["atTime"], shown["dueTime"]) == ("2026-12-01T10:30:00.123Z", "2026-12-01T10:33:53Z")
    assert with_times({"due": None, "deletedAt": 0}) == {
        "due": None,
        "deletedAt": 0,
        "deletedAtTime": "1970-01-01T00:00:00Z",
    }
    assert rfc3339(10**13) is None and "dueTime" not in with_times({"due": 10**13})


@pytest.mark.parametrize(
    "line, said",
    [
        (
            "jobttl.core.kube.client.PermanentApiError: 403 from the API server: jobttl's worker needs 'delete' on tfjobs",
            "403 from the API server: jobttl's worker needs 'delete' on tfjobs",
        ),
        (
            "rq.timeouts.JobTimeoutException: Task exceeded maximum timeout value (60 seconds)",
            "Task exceeded maximum timeout value (60 seconds)",
        ),
        ("jobttl.core.kube.client.ObjectGone", "object gone"),
        ("KeyError: 'metadata'", "unexpected key error: 'metadata'"),
        ("ValueError: bad value", "bad value"),
        ("Forbidden: the API server refused delete tfjobs", "Forbidden: the API server refused delete tfjobs"),
        (
            "Work-horse terminated unexpectedly; waitpid returned 9 (signal 9)",
            "Work-horse terminated unexpectedly; waitpid returned 9 (signal 9)",
        ),
        ("kubeflow.org/v1: not served", "kubeflow.org/v1: not served"),
    ],
)
def test_an_error_line_loses_the_python_class_it_names(line, said):
    assert plain_error(line) == said


def test_an_exception_is_described_by_its_message_and_a_bug_says_so_in_words():
    assert describe(PermanentApiError("403 from the API server")) == "403 from the API server"
    assert describe(NotFound("no pending deletion for team-a/x")) == "no pending deletion for team-a/x"
    assert describe(KeyError("metadata")) == "unexpected key error: 'metadata'"
    assert describe(PermissionError(13, "Permission denied")) == "[Errno 13] Permission denied"
