"""The reference clock: offsets from Date headers and Redis TIME, and when they are a problem."""

from email.utils import formatdate

from jobttl.core.clock import ReferenceClock

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
