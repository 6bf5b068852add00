"""The reference clock: offsets from Date headers and Redis TIME, and when they are a problem."""

from email.utils import formatdate

from jobttl.core.domain.decisions.clock import DRIFT, WINDOW, ReferenceClock

NOW = 1_800_000_000.0


def test_an_api_server_ahead_of_this_host_is_a_problem_beyond_the_bound():
    clock = ReferenceClock(bound=30, local=lambda: NOW)
    clock.observe_api(formatdate(NOW + 120, usegmt=True), NOW - 0.1, NOW)
    assert abs(clock.api.seconds - 120.45) < 0.1
    assert "this host's clock is -120" in clock.problem()
    assert abs(clock.now() - (NOW + 120.45)) < 0.1


def test_within_the_bound_the_clocks_agree_and_now_is_the_api_servers():
    clock = ReferenceClock(bound=30, local=lambda: NOW)
    clock.observe_api(formatdate(NOW - 20, usegmt=True), NOW, NOW)
    clock.observe_redis(int(NOW) - 20, 0, NOW, NOW)
    assert clock.problem() is None
    assert abs(clock.now() - (NOW - 19.5)) < 0.01


def test_a_reading_whose_round_trip_spans_a_step_of_this_hosts_clock_is_ignored():
    """Sent before a step of +30 days, answered after it: the reading would say +15 days."""
    clock = ReferenceClock(bound=30, local=lambda: NOW)
    step = 30 * 86400
    clock.observe_api(formatdate(NOW, usegmt=True), NOW, NOW + step)
    clock.observe_redis(int(NOW), 0, NOW, NOW + step)
    assert clock.api is None and clock.redis is None
    clock.observe_api(formatdate(NOW, usegmt=True), NOW + step, NOW + step)  # sent and answered after it
    assert abs(clock.api.seconds + step) < 1
    clock.observe_api(formatdate(NOW, usegmt=True), NOW + step, NOW)  # a step back mid-request
    assert abs(clock.api.seconds + step) < 1, "the last good reading stands"


def test_redis_disagreeing_with_the_api_server_is_a_problem_too():
    clock = ReferenceClock(bound=30, local=lambda: NOW)
    clock.observe_api(formatdate(NOW, usegmt=True), NOW, NOW)
    clock.observe_redis(int(NOW) + 300, 0, NOW, NOW)
    assert "Redis's clock is +299" in clock.problem()


def readings(
    clock: ReferenceClock, true_offset: float, start: float, count: int, step: float = 0.37, round_trip: float = 0.004
) -> None:
    """`count` exchanges at varied fractions of a second, the server answering mid-way."""
    for i in range(count):
        sent = start + i * step
        server = sent + round_trip / 2 + true_offset
        clock.raw = lambda now=sent + round_trip: now  # the local clock runs as the raw monotonic one does
        clock.observe_api(formatdate(int(server), usegmt=True), sent, sent + round_trip)


def test_readings_at_different_fractions_of_a_second_narrow_the_offset_down():
    clock = ReferenceClock(bound=30, local=lambda: NOW)
    readings(clock, 0.3, NOW, 1)
    assert clock.api.high - clock.api.low > 0.9, "one Date header: only the second"
    readings(clock, 0.3, NOW, 40)
    assert clock.api.low <= 0.3 <= clock.api.high and clock.api.high - clock.api.low < 0.05
    assert abs(clock.api.seconds - 0.3) < 0.03
    assert clock.as_dict()["apiServerOffsetUncertainty"] < 0.03


def test_the_earliest_now_is_never_after_the_api_servers_time():
    """What 'is it due?' is asked of: however few readings, never ahead of the server."""
    for true_offset in (-0.9, -0.4, 0.0, 0.2, 0.5, 0.99, 7.3):
        for count in (1, 2, 3, 10):
            local = NOW + count * 0.37 + 0.123
            clock = ReferenceClock(bound=30, local=lambda: local)
            readings(clock, true_offset, NOW, count)
            assert clock.earliest() <= local + true_offset + 1e-6, (true_offset, count)
            assert clock.earliest() <= clock.now()


def test_a_reading_that_contradicts_the_others_starts_afresh():
    """The local clock was stepped by 5 s: the old readings no longer say anything."""
    clock = ReferenceClock(bound=30, local=lambda: NOW)
    readings(clock, 0.3, NOW, 40)
    readings(clock, 0.3 - 5, NOW + 100, 1)
    assert abs(clock.api.seconds - (0.3 - 5)) <= 0.5 and abs(clock.api.since - (NOW + 100)) < 0.01


def test_readings_are_combined_for_a_window_only():
    """A clock slewed slowly stays inside the old bounds: they are dropped after WINDOW."""
    clock = ReferenceClock(bound=30, local=lambda: NOW)
    readings(clock, 0.3, NOW, 40)
    readings(clock, 0.35, NOW + WINDOW + 1, 1)
    assert abs(clock.api.since - (NOW + WINDOW + 1)) < 0.01 and clock.api.high - clock.api.low > 0.9


def test_a_local_clock_slewed_or_stepped_by_less_than_a_second_starts_afresh():
    """Stepped 0.3 s ahead: the new readings still overlap the old bounds, which no longer hold;
    the raw monotonic clock did not move with it, so the bounds start again (never early)."""
    clock = ReferenceClock(bound=30, local=lambda: NOW)
    readings(clock, 0.3, NOW, 40)
    sent = NOW + 100
    clock.raw = lambda: sent + 0.004 - 0.3  # the wall clock moved 0.3 s more than the raw one
    clock.observe_api(formatdate(int(sent + 0.002 + 0.0), usegmt=True), sent, sent + 0.004)  # offset now 0.0
    assert clock.api.low <= 0.0 <= clock.api.high, "the old bounds (0.3 +- 0.03) are gone"


def test_combined_bounds_widen_with_time_by_the_clocks_drift():
    clock = ReferenceClock(bound=30, local=lambda: NOW)
    readings(clock, 0.3, NOW, 40)
    before = clock.api.high - clock.api.low
    readings(clock, 0.3, NOW + 400, 1, round_trip=2.0)  # a slow answer: a wide reading
    assert clock.api.high - clock.api.low > before + DRIFT * 400 and clock.api.low <= 0.3 <= clock.api.high
