"""The watchdog's judgement (jobttl.worker.watchdog), pure: observations in, a verdict out."""

import pytest

from jobttl.worker.watchdog import DEAD, EXIT, OVERDUE, RESTART, STUCK, Observation, SchedulerWatch

ME, OTHER = "mine", "theirs"


def seen(started=True, alive=True, heartbeat="b1", holder=ME, overdue=None) -> Observation:
    return Observation(
        started=started, alive=alive, heartbeat=heartbeat, lock_holder=holder, name=ME, oldest_overdue=overdue
    )


def watch_from(start: float = 0.0, **kwargs) -> SchedulerWatch:
    watch = SchedulerWatch(bound=30, **kwargs)
    watch.started(start)
    return watch


def test_a_beating_scheduler_with_nothing_overdue_is_fine_for_ever():
    watch = watch_from()
    assert all(watch.judge(seen(heartbeat=f"b{t}"), t) is None for t in range(0, 3600, 5))


def test_a_dead_scheduler_process_is_a_stall_at_once():
    assert watch_from().judge(seen(alive=False), 1).reason == DEAD


def test_a_heartbeat_that_stops_changing_is_a_stall_after_the_bound_not_before():
    watch = watch_from()
    assert watch.judge(seen(heartbeat="b1"), 10) is None
    assert watch.judge(seen(heartbeat="b1"), 40) is None  # 30 s unchanged: not yet more than the bound
    assert watch.judge(seen(heartbeat="b1"), 41).reason == STUCK


def test_a_scheduler_that_never_beats_after_its_start_is_stuck():
    watch = watch_from(start=100)
    assert watch.judge(seen(heartbeat=None), 120) is None
    assert watch.judge(seen(heartbeat=None), 131).reason == STUCK


@pytest.mark.parametrize("holder", [ME, None])
def test_an_overdue_deletion_that_does_not_move_is_a_stall_when_the_lock_is_ours_or_nobodys(holder):
    watch = watch_from()
    assert watch.judge(seen(heartbeat="b1", holder=holder, overdue="job-a"), 5) is None
    assert watch.judge(seen(heartbeat="b2", holder=holder, overdue="job-a"), 30) is None
    verdict = watch.judge(seen(heartbeat="b3", holder=holder, overdue="job-a"), 36)
    assert (verdict.reason, verdict.action) == (OVERDUE, RESTART)


def test_overdue_deletions_that_keep_moving_are_not_a_stall():
    watch = watch_from()
    assert all(watch.judge(seen(heartbeat=f"b{t}", overdue=f"job-{t}"), t) is None for t in range(0, 600, 5))


def test_another_workers_scheduler_holding_the_queue_is_its_own_workers_to_watch():
    watch = watch_from()
    assert all(
        watch.judge(seen(started=False, alive=False, holder=OTHER, overdue="job-a"), t) is None
        for t in range(0, 600, 5)
    )


def test_stalls_beyond_the_allowed_restarts_within_the_window_stop_the_worker():
    watch = watch_from(max_restarts=2, window=600)
    assert [watch.judge(seen(alive=False), t).action for t in (10, 20, 30)] == [RESTART, RESTART, EXIT]


def test_stalls_spread_wider_than_the_window_are_each_restarted():
    watch = watch_from(max_restarts=1, window=600)
    assert [watch.judge(seen(alive=False), t).action for t in (0, 700, 1400)] == [RESTART, RESTART, RESTART]


def test_a_restart_measures_the_new_scheduler_from_its_start():
    watch = watch_from()
    assert watch.judge(seen(heartbeat="b1"), 0) is None
    assert watch.judge(seen(heartbeat="b1"), 31).reason == STUCK  # judged: the watch starts again
    assert watch.judge(seen(heartbeat="b1"), 40) is None
