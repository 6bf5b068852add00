"""The RECONCILE script's contract (core/store/lua/reconcile.lua through `scripts.Reconcile`), against a
real redis-server: every branch, from the state it reads to what it writes and answers.

The script is what the store sends for one member; these tests send it directly, with the Redis
state each branch needs written by hand, and read back what it wrote. The guard's rule is
checked as a differential: one table through `guard.is_news` (its specification) and the script.
"""

import json
import time
import uuid

import pytest

from jobttl.core.store import keys, scripts
from jobttl.core.store.guard import NEWS_HORIZON, is_news
from jobttl.core.domain.wire.identity import JobRef
from tests.core.own_redis import redis, ref, server  # noqa: F401 (fixtures)

OUTBOX = keys.notices("contract")
HOUR = 3600


def reconcile(redis, ref, **given):
    """RECONCILE for `ref`'s job stage, an expiring decision due in a day unless `given` says otherwise."""
    call = dict(
        ref=ref,
        outbox=OUTBOX,
        member=ref.uid,
        uid=ref.uid,
        expiring=True,
        due=now(redis) + 86400,
        reason="expires",
        keep_seen="",
        until_seen="",
        keep_for=None,
        collect=False,
        burst_limit=None,
        burst_window=60,
        news_horizon=NEWS_HORIZON,
        job_prefix="rq:job:delete-",
        dry_run=False,
        unbooked=None,
        held_entry=json.dumps({"ref": ref.as_dict()}),
        audit_max=1000,
        card_ttl=600,
        echo=False,
        invalid=None,
        fields={**ref.as_dict(), "by": "test"},
    )
    return scripts.Reconcile(**{**call, **given}).run(redis)


def now(redis) -> int:
    return int(redis.time()[0])


def pending(redis, ref, due, status="scheduled", member=None, **meta):
    """What a booking leaves: the index entry and its RQ job (status, record); status None: the RQ job is gone."""
    member = member or ref.uid
    redis.zadd(keys.PENDING_INDEX, {member: due})
    if status is not None:
        prefix = "delete" if member == ref.uid else member.split(":")[0]
        redis.hset(
            f"rq:job:{prefix}-{ref.uid}-{due}",
            mapping={
                "status": status,
                "meta": json.dumps({"ref": [ref.api_version, ref.kind, ref.namespace, ref.name], **meta}),
            },
        )


def events(redis) -> list[dict[str, str]]:
    return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in redis.xrange(keys.AUDIT_STREAM)]


def card(redis, ref) -> dict:
    raw = redis.hget(keys.card(ref.namespace, ref.name), ref.uid)
    return json.loads(raw) if raw else {}


def skipped(ref, reason="no-ttl", detail="no TTL set") -> str:
    return json.dumps(
        {"event": "skipped", "kind": ref.kind, "apiVersion": ref.api_version, "reason": reason, "detail": detail}
    )


# --- new, moved, unchanged: what is to be booked ----------------------------------------------------


def test_a_new_deletion_is_answered_schedule_and_nothing_is_written(redis, ref):
    due = now(redis) + HOUR
    reply = reconcile(redis, ref, due=due)
    assert (reply.change, reply.due, reply.previous_due, reply.previous_state) == ("schedule", due, None, None)
    assert abs(reply.now - time.time()) < 5, "Redis's clock"
    assert redis.zscore(keys.PENDING_INDEX, ref.uid) is None, "the store writes the RQ job and COMMIT together"
    assert events(redis) == []


def test_a_moved_deletion_is_answered_schedule_with_what_was_pending(redis, ref):
    before = now(redis) + HOUR
    pending(redis, ref, before)
    reply = reconcile(redis, ref, due=before + HOUR)
    assert (reply.change, reply.due, reply.previous_due, reply.previous_state) == (
        "schedule",
        before + HOUR,
        before,
        "scheduled",
    )
    assert redis.zscore(keys.PENDING_INDEX, ref.uid) == before, "still the old one until the store commits"


@pytest.mark.parametrize(
    "status, meta", [("scheduled", {}), ("queued", {}), ("deferred", {}), ("failed", {"permanentFailure": True})]
)
def test_the_same_deletion_booked_alike_is_unchanged(redis, ref, status, meta):
    due = now(redis) + HOUR
    pending(redis, ref, due, status, **meta)
    assert reconcile(redis, ref, due=due).change == "unchanged"


def test_a_dry_run_record_that_would_have_deleted_is_unchanged_in_dry_run(redis, ref):
    due = now(redis) - 10
    pending(redis, ref, due, "finished", dryRun=True, wouldDeleteAt=due + 1)
    assert reconcile(redis, ref, due=due, dry_run=True).change == "unchanged"


@pytest.mark.parametrize(
    "status, meta, dry_run",
    [
        ("failed", {}, False),  # retrying may help: booked again
        ("finished", {}, False),  # ran without deleting (refused): booked again
        (None, {}, False),  # its RQ job is gone
        ("scheduled", {"dryRun": True}, False),  # dry run turned off: a real booking replaces the record
        ("scheduled", {}, True),  # dry run turned on
    ],
    ids=["failed", "finished", "rq-job-gone", "was-dry-run", "now-dry-run"],
)
def test_the_same_due_time_not_booked_alike_is_booked_again(redis, ref, status, meta, dry_run):
    due = now(redis) + HOUR
    pending(redis, ref, due, status, **meta)
    assert reconcile(redis, ref, due=due, dry_run=dry_run).change == "schedule"


def test_a_deletion_a_worker_runs_is_its_to_decide(redis, ref):
    due = now(redis) - 10
    pending(redis, ref, due, "started")
    reply = reconcile(redis, ref, due=due)
    assert (reply.change, reply.due) == ("running", due)


# --- what stops a booking: a tombstone, a stage done, an operator ------------------------------------


def test_an_object_jobttl_deleted_is_ignored_whatever_the_event_says(redis, ref):
    redis.set(keys.tombstone(ref.namespace, ref.name, ref.uid), "{}")
    reply = reconcile(redis, ref, due=now(redis) - 10)
    assert (reply.change, reply.reason) == ("ignored", "already-deleted")
    assert redis.zcard(keys.PENDING_INDEX) == 0


def test_a_stage_done_for_good_is_never_booked_again_and_its_entry_is_cancelled(redis, ref):
    member = f"pods:{ref.uid}"
    redis.hset(keys.override(ref.uid), "done:pods", "1")
    assert reconcile(redis, ref, member=member, due=now(redis) + HOUR).change == "ignored"
    pending(redis, ref, now(redis) + HOUR, member=member)
    reply = reconcile(redis, ref, member=member, due=now(redis) + HOUR)
    assert (reply.change, reply.reason) == ("cancelled", "done")
    assert redis.zscore(keys.PENDING_INDEX, member) is None
    assert [(e["event"], e["reason"]) for e in events(redis)] == [("cancelled", "done")]
    assert reconcile(redis, ref, due=now(redis) + HOUR).change == "schedule", "the job's own stage is not done"


@pytest.mark.parametrize("said", [{"keep": "true"}, {"until": "1900000000"}, {"keep": "true", "until": "1900000000"}])
def test_an_override_the_due_time_was_not_decided_with_writes_nothing_and_is_answered(redis, ref, said):
    """A stale belief: the store decides again with what the operator said (jobttl.core.domain.decisions.due)."""
    redis.hset(keys.override(ref.uid), mapping=said)
    pending(redis, ref, now(redis) + HOUR)
    reply = reconcile(redis, ref, due=None, reason="kept-by-operator", keep_seen="", until_seen="")
    assert reply.change == "override"
    assert reply.said == (said.get("keep", ""), said.get("until", ""))
    assert redis.zscore(keys.PENDING_INDEX, ref.uid) is not None and events(redis) == [], "nothing written"


def test_an_override_the_due_time_was_decided_with_is_used_as_decided(redis, ref):
    redis.hset(keys.override(ref.uid), mapping={"until": "1900000000", "by": "someone", "at": "1"})
    reply = reconcile(redis, ref, due=1_900_000_000, until_seen="1900000000")
    assert (reply.change, reply.due) == ("schedule", 1_900_000_000)


def test_an_operators_keep_cancels_what_is_pending_and_lasts_while_it_is_read(redis, ref):
    redis.hset(keys.override(ref.uid), "keep", "true")
    redis.expire(keys.override(ref.uid), 10)
    pending(redis, ref, now(redis) + HOUR)
    reply = reconcile(redis, ref, due=None, reason="kept-by-operator", keep_seen="true", keep_for=400 * 86400)
    assert (reply.change, reply.reason) == ("cancelled", "kept-by-operator")
    assert redis.ttl(keys.override(ref.uid)) > 399 * 86400
    assert [(e["event"], e["reason"]) for e in events(redis)] == [("cancelled", "kept-by-operator")]
    kept = json.dumps(
        {"event": "skipped", "reason": "kept-by-operator", "kind": ref.kind, "apiVersion": ref.api_version}
    )
    assert (
        reconcile(redis, ref, due=None, reason="kept-by-operator", keep_seen="true", unbooked=kept).change == "ignored"
    )
    assert (card(redis, ref)["event"], card(redis, ref)["reason"], card(redis, ref)["apiVersion"]) == (
        "skipped",
        "kept-by-operator",
        ref.api_version,
    )


def test_a_decision_that_does_not_expire_reads_no_override(redis, ref):
    redis.hset(keys.override(ref.uid), "keep", "true")
    redis.set(keys.tombstone(ref.namespace, ref.name, ref.uid), "{}")
    reply = reconcile(redis, ref, expiring=False, due=None, reason="no-ttl", unbooked=skipped(ref))
    assert (reply.change, reply.reason) == ("ignored", None), "neither the override nor the tombstone is asked"


# --- not to be deleted: cancelled, settled on the card, the echo of a deletion, the invalid TTL ---------


def test_a_deletion_that_no_longer_applies_is_cancelled_with_its_reason(redis, ref):
    due = now(redis) + HOUR
    pending(redis, ref, due, dryRun=True)
    redis.sadd(keys.DRY_RUN, "TFJob.kubeflow.org")
    redis.zadd(keys.dry_run("TFJob.kubeflow.org"), {ref.uid: due})
    reply = reconcile(redis, ref, expiring=False, due=None, reason="no-ttl")
    assert (reply.change, reply.reason, reply.previous_due) == ("cancelled", "no-ttl", due)
    assert redis.zscore(keys.PENDING_INDEX, ref.uid) is None
    assert redis.zscore(keys.dry_run("TFJob.kubeflow.org"), ref.uid) is None, "the dry-run record goes with it"
    [entry] = events(redis)
    assert (entry["event"], entry["reason"], entry["uid"], entry["by"]) == ("cancelled", "no-ttl", ref.uid, "test")
    assert card(redis, ref)["event"] == "cancelled" and card(redis, ref)["log"], "on the card, in its log"


def test_nothing_pending_and_nothing_to_book_is_kept_once_on_the_card_not_in_the_trail(redis, ref):
    reply = reconcile(redis, ref, expiring=False, due=None, reason="no-ttl", unbooked=skipped(ref))
    assert reply.change == "ignored"
    assert (card(redis, ref)["event"], card(redis, ref)["reason"]) == ("skipped", "no-ttl")
    at = card(redis, ref)["at"]
    reconcile(redis, ref, expiring=False, due=None, reason="no-ttl", unbooked=skipped(ref))
    assert card(redis, ref)["at"] == at, "the same decision is not written again"
    assert events(redis) == [] and "log" not in card(redis, ref)


def test_what_jobttl_did_last_is_not_overwritten_by_what_events_say_after(redis, ref):
    redis.hset(keys.card(ref.namespace, ref.name), ref.uid, json.dumps({"event": "deleted", "at": "1-0"}))
    reconcile(redis, ref, expiring=False, due=None, reason="being-deleted", unbooked=skipped(ref, "being-deleted"))
    assert card(redis, ref)["event"] == "deleted"


@pytest.mark.parametrize("echo, change", [(True, "running"), (False, "cancelled")])
def test_a_deletions_own_echo_leaves_it_to_its_running_job(redis, ref, echo, change):
    pending(redis, ref, now(redis) - 10, "started")
    assert reconcile(redis, ref, expiring=False, due=None, reason="being-deleted", echo=echo).change == change


def test_an_invalid_ttl_is_noticed_once_per_value(redis, ref):
    invalid = json.dumps({"invalid": "bad", "ref": ref.as_dict()})
    told = dict(
        expiring=False, due=None, reason="invalid-ttl", invalid=invalid, unbooked=skipped(ref, "invalid-ttl", "bad")
    )
    reconcile(redis, ref, **told)
    assert redis.zrange(OUTBOX, 0, -1) == [invalid.encode()]
    redis.delete(OUTBOX)  # a worker drained the outbox
    reconcile(redis, ref, **told)
    assert redis.zcard(OUTBOX) == 0, "the card says it was told"
    other = {**told, "unbooked": skipped(ref, "invalid-ttl", "worse")}
    reconcile(redis, ref, **other)
    assert redis.zcard(OUTBOX) == 1, "another value is told again"


def test_an_invalid_ttl_goes_into_the_audit_trail_as_often_as_it_is_told(redis, ref):
    """The `invalid-ttl` entry notifications read (jobttl.core.domain.notices.notify): once per object and value."""

    def told(detail):
        invalid = json.dumps({"invalid": detail, "ref": ref.as_dict()})
        reconcile(
            redis,
            ref,
            expiring=False,
            due=None,
            reason="invalid-ttl",
            invalid=invalid,
            unbooked=skipped(ref, "invalid-ttl", detail),
            fields={**ref.as_dict(), "by": "test", "detail": detail, "ttlSource": "annotation jobttl.io/ttl"},
        )

    told("bad")
    told("bad")
    told("worse")
    entries = [
        {k.decode(): v.decode() for k, v in fields.items()}
        for _, fields in redis.xrange(keys.AUDIT_STREAM)
        if fields[b"event"] == b"invalid-ttl"
    ]
    assert [(e["detail"], e["name"], e["ttlSource"]) for e in entries] == [
        ("bad", ref.name, "annotation jobttl.io/ttl"),
        ("worse", ref.name, "annotation jobttl.io/ttl"),
    ]


# --- the guard: news collected, counted, held --------------------------------------------------------


def test_news_is_answered_due_now_when_collected(redis, ref):
    due = now(redis) - 10
    assert reconcile(redis, ref, due=due, collect=True).change == "due-now"
    assert redis.zcard(keys.RECENT_DUE) == 0 and redis.hlen(keys.HELD) == 0, "nothing written"


def test_news_beyond_the_burst_limit_is_held_and_below_it_counted(redis):
    refs = [JobRef("kubeflow.org/v1", "TFJob", "team", f"j{i}", str(uuid.uuid4())) for i in range(3)]
    due = now(redis) - 10
    replies = [reconcile(redis, r, due=due, burst_limit=2) for r in refs]
    assert [r.change for r in replies] == ["schedule", "schedule", "held"]
    assert redis.zcard(keys.RECENT_DUE) == 2
    assert json.loads(redis.hget(keys.HELD, refs[2].uid)) == {"ref": refs[2].as_dict()}
    [entry] = events(redis)
    assert (entry["event"], entry["reason"], entry["uid"]) == ("held", "burst", refs[2].uid)


def test_the_burst_window_forgets_what_came_due_before_it(redis):
    redis.zadd(keys.RECENT_DUE, {"old-1": now(redis) - 120, "old-2": now(redis) - 61})
    ref = JobRef("kubeflow.org/v1", "TFJob", "team", "fresh", str(uuid.uuid4()))
    assert reconcile(redis, ref, due=now(redis) - 10, burst_limit=1, burst_window=60).change == "schedule"
    assert redis.zrange(keys.RECENT_DUE, 0, -1) == [ref.uid.encode()]


def test_without_a_burst_limit_news_is_neither_counted_nor_held(redis, ref):
    assert reconcile(redis, ref, due=now(redis) - 10, burst_limit=None).change == "schedule"
    assert redis.zcard(keys.RECENT_DUE) == 0


# (due, pending: None or (due, booked as), dry run) as offsets from now, and whether it is news.
NEWS = [
    ((-100, None, False), True),  # due now, nothing pending
    ((100, None, False), False),  # due later
    ((-100, (-200, "real"), False), False),  # already due in the schedule
    ((-100, (-200, "gone"), False), True),  # its RQ job is gone: not on its way
    ((-100, (-200, "dry"), False), True),  # a dry-run record is not a deletion on its way
    ((-100, (7200, "real"), False), True),  # due now, was far off
    ((600, (7200, "real"), False), True),  # pulled in to within the horizon from beyond it
    ((600, (1800, "real"), False), False),  # was within the horizon already
    ((5000, (7200, "real"), False), False),  # still beyond the horizon
    ((7200, (600, "real"), False), False),  # pushed out
    ((-100, None, True), False),  # dry run deletes nothing
]


@pytest.mark.parametrize("case, news", NEWS, ids=[str(c) for c, _ in NEWS])
def test_the_script_finds_news_exactly_as_the_guards_rule_says(redis, ref, case, news):
    due_in, before, dry_run = case
    at = now(redis)
    if before is not None:
        status, meta = {"real": ("scheduled", {}), "gone": (None, {}), "dry": ("scheduled", {"dryRun": True})}[
            before[1]
        ]
        pending(redis, ref, at + before[0], status, **meta)
    pending_due = at + before[0] if before else None
    booked = before is not None and before[1] == "real"
    assert is_news(at + due_in, pending_due, booked, at, dry_run) is news, "the specification"
    reply = reconcile(redis, ref, due=at + due_in, collect=True, dry_run=dry_run)
    assert (reply.change == "due-now") is news, "the script"
