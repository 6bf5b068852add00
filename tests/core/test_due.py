"""When a deletion is due (jobttl.core.domain.decisions.due): the decision's expiry as an operator's override
changes it. Pure: a table, as the ttlafterfinished controller tests its timeLeft."""

import pytest

from jobttl.core.domain.decisions.decision import Decision, Verdict
from jobttl.core.domain.decisions.due import KEPT_BY_OPERATOR, NO_OVERRIDE, POSTPONED_BY_OPERATOR, Due, Override, due_at

EXPIRES = Decision(Verdict.EXPIRES, "ttl", finished_at=900, ttl=100, expires_at=1000)


@pytest.mark.parametrize(
    "decision, override, due",
    [
        (EXPIRES, NO_OVERRIDE, Due(1000)),
        (EXPIRES, Override(until=2000), Due(2000, POSTPONED_BY_OPERATOR)),
        (EXPIRES, Override(until=500), Due(1000)),  # postponed to before its own time: its own time
        (EXPIRES, Override(until=1000), Due(1000)),
        (EXPIRES, Override(keep=True), Due(None, KEPT_BY_OPERATOR)),
        (EXPIRES, Override(keep=True, until=2000), Due(None, KEPT_BY_OPERATOR)),  # a keep wins
        (Decision(Verdict.NO_TTL, "no ttl"), Override(until=2000), Due(None)),  # nothing to postpone
        (Decision(Verdict.NO_TTL, "no ttl"), Override(keep=True), Due(None)),
        (None, Override(until=2000), Due(None)),  # the object is gone
    ],
    ids=[
        "own-time",
        "postponed",
        "postponed-to-before",
        "postponed-to-the-same",
        "kept",
        "kept-and-postponed",
        "not-expiring-postponed",
        "not-expiring-kept",
        "gone",
    ],
)
def test_the_due_time_is_the_decisions_as_an_operator_changed_it(decision, override, due):
    assert due_at(decision, override) == due


@pytest.mark.parametrize(
    "keep, until, override",
    [
        (None, None, NO_OVERRIDE),
        (b"", b"", NO_OVERRIDE),
        (b"true", None, Override(keep=True)),
        ("false", "1900000000", Override(until=1_900_000_000)),
        (None, b"1900000000.0", Override(until=1_900_000_000)),
        (None, b"1900000000.2", Override(until=1_900_000_001)),  # up, never before the time said
    ],
)
def test_the_override_is_read_as_stored(keep, until, override):
    assert Override.read(keep, until) == override


def test_an_until_that_is_no_time_is_an_error_not_a_deletion():
    with pytest.raises(ValueError):
        Override.read(None, "next friday")
