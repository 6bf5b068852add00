"""Dry run is never due or overdue: the dry-run records beside the index, against real Redis.

What dry run decides stays pending past its due time, as a would-delete. The schedule's gauges
(`jobttl.core.runtime.metrics`) and `jobttl status` count it apart, from the sorted sets the scripts
keep beside the index (`jobttl:dry-run:kinds:<Kind.group>`), by kind and group (a batch/v1 Job
and a Volcano Job are two kinds of one name), and every way a member leaves the index or changes
mode keeps them true. A Redis from before those sets, or from when they were kept by bare Kind,
has them filed once (`jobttl.core.store.upgrade`).
"""

import io
import json
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobttl.core.store import keys, upgrade
from jobttl.core.store.audit import Audit
from jobttl.core.domain.kinds.registry import BATCH_JOB, PYTORCHJOB, TFJOB, KindRegistry
from jobttl.core.store import gauges as schedule_gauges
from jobttl.core.runtime.metrics import Metrics
from jobttl.core.services.operations import Operations
from jobttl.core.domain.rules.policy import parse_policy
from jobttl.core.services.reconcile import Reconciler
from jobttl.core.store.schedule import Change, Schedule, file_dry_run
from tests.fixtures import job_object, volcano_job, with_server_fields
from tests.core.own_redis import redis, server  # noqa: F401 (fixtures)
from tests.services import ROOT

# A rule's dry run, global off: jobs labelled rehearsal=true are only rehearsed.
PER_RULE = {
    "kinds": ["TFJob", "PyTorchJob"],
    "rules": [{"name": "rehearsal", "selector": {"matchLabels": {"rehearsal": "true"}}, "dryRun": True}],
}
HOUR = 3600
TF = "TFJob.kubeflow.org"


@pytest.fixture
def schedule(redis):
    return Schedule(redis, "dry", retry_intervals=[])


def reconciler(schedule, policy=PER_RULE):
    return Reconciler(schedule, Audit(schedule.redis), parse_policy(policy))


def finished(kind=TFJOB, rehearsal=False, ago=HOUR, ttl=60):
    """Finished `ago` seconds ago with this TTL: due ago - ttl seconds ago."""
    obj = with_server_fields(job_object(kind, f"j-{uuid.uuid4().hex[:8]}", "ml", at=time.time() - ago, ttl=ttl))
    if rehearsal:
        obj["metadata"]["labels"] = {"rehearsal": "true"}
    return obj


def gauges(redis) -> dict[tuple[str, tuple], float]:
    text = generate_latest(_registry(redis, "dry")).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def overdue(redis) -> float:
    return gauges(redis)[("jobttl_overdue_deletions", ())]


def would_delete(redis) -> dict[str, float]:
    """jobttl_dry_run_would_delete by Kind.group."""
    return {
        f"{dict(labels)['kind']}.{dict(labels)['group']}": value
        for (name, labels), value in gauges(redis).items()
        if name == "jobttl_dry_run_would_delete"
    }


def test_a_rules_dry_run_records_are_counted_by_kind_and_never_overdue(schedule, redis):
    r = reconciler(schedule)
    for obj, kind in [
        (finished(TFJOB, True), TFJOB),
        (finished(TFJOB, True), TFJOB),
        (finished(PYTORCHJOB, True), PYTORCHJOB),
        (finished(TFJOB), TFJOB),
        (finished(TFJOB, True, ago=60, ttl=HOUR), TFJOB),
    ]:  # a rehearsal not due yet
        assert r.reconcile(obj, kind, "event").change is Change.SCHEDULED
    assert overdue(redis) == 1  # the one real deletion, due an hour ago
    assert would_delete(redis) == {TF: 2, "PyTorchJob.kubeflow.org": 1}  # due now; the one due in an hour is not
    assert gauges(redis)[("jobttl_pending_deletions", ())] == 5
    status = Operations(redis, schedule, Audit(redis)).status()
    assert (status["overdue"], status["dueWithinHour"], status["dryRunWouldDelete"]) == (1, 1, 3)


def test_a_dry_run_record_leaves_the_counts_with_its_pending_entry(schedule, redis):
    r = reconciler(schedule)
    restarted, cancelled, kept, gone = (finished(rehearsal=True) for _ in range(4))
    for obj in (restarted, cancelled, kept, gone):
        r.reconcile(obj, TFJOB, "event")
    assert would_delete(redis) == {TF: 4}
    # A job that is no longer finished (restarted) ...
    assert r.reconcile({**restarted, "status": {}}, TFJOB, "event").change is Change.CANCELLED
    # ... one `jobttl cancel` keeps ...
    Operations(redis, schedule, Audit(redis), r).cancel("ml", cancelled["metadata"]["name"])
    # ... one an operator's keep meets at its next event ...
    schedule.set_override(kept["metadata"]["uid"], {"keep": "true"}, "operator")
    assert r.reconcile(kept, TFJOB, "event").change is Change.CANCELLED
    # ... and one gone from the cluster.
    assert r.forget(schedule.get(gone["metadata"]["uid"]).ref, "gone", "worker").change is Change.CANCELLED
    assert redis.zcard(keys.PENDING_INDEX) == 0
    assert would_delete(redis) == {TF: 0} and overdue(redis) == 0


def test_a_rule_turning_dry_run_off_makes_its_deletions_real_and_overdue_again(schedule, redis):
    obj = finished(rehearsal=True)
    reconciler(schedule).reconcile(obj, TFJOB, "event")
    assert (overdue(redis), would_delete(redis)) == (0, {TF: 1})
    # The same rule, dry run off: the same due time, now a real deletion (held by no guard here).
    real = {**PER_RULE, "rules": [{**PER_RULE["rules"][0], "dryRun": False}]}
    outcome = reconciler(schedule, real).reconcile(obj, TFJOB, "event")
    assert outcome.change is Change.SCHEDULED and not schedule.get(obj["metadata"]["uid"]).dry_run
    assert (overdue(redis), would_delete(redis)) == (1, {TF: 0})
    # And back: dry run again.
    reconciler(schedule).reconcile(obj, TFJOB, "event")
    assert (overdue(redis), would_delete(redis)) == (0, {TF: 1})


def test_a_redis_from_before_the_dry_run_sets_has_them_filed_once_on_start(schedule, redis):
    r = reconciler(schedule)
    dry, real = finished(rehearsal=True), finished()
    r.reconcile(dry, TFJOB, "event")
    r.reconcile(real, TFJOB, "event")
    upgrade.ensure(redis)
    # As the previous release left it: the same index and records, no dry-run sets.
    redis.delete(keys.DRY_RUN, keys.dry_run(TF), keys.DRY_RUN_INDEXED)
    assert overdue(redis) == 2  # what every dashboard showed before
    assert upgrade.ensure(redis) is True
    assert (overdue(redis), would_delete(redis)) == (1, {TF: 1})
    assert upgrade.ensure(redis) is False  # marked: cheap from now on
    assert redis.get(keys.SCHEMA) == b"2"  # the layout an earlier 0.2 process reads is the same


def test_the_scrape_reads_a_bounded_number_of_keys_however_many_dry_run_records(schedule, redis):
    r = reconciler(schedule)
    for _ in range(200):
        r.reconcile(finished(rehearsal=True), TFJOB, "event")
    before = redis.info("commandstats")
    gauges(redis)
    after = redis.info("commandstats")
    calls = {name: after[name]["calls"] - before.get(name, {"calls": 0})["calls"] for name in after}
    # The record hashes are never read at scrape time: ZCOUNTs (a dry-run set per kind) instead.
    assert calls.get("cmdstat_hmget", 0) == calls.get("cmdstat_hget", 0) == calls.get("cmdstat_hgetall", 0) == 0
    assert calls.get("cmdstat_zcount", 0) <= 4
    assert would_delete(redis) == {TF: 200}


def test_the_repair_files_what_was_written_without_the_dry_run_sets_and_drops_what_they_hold_alone(schedule, redis):
    """What the resync runs (jobttl.core.services.resync): a process of the previous release, during a
    rollout, wrote the index but not the dry-run sets."""
    r = reconciler(schedule)
    rehearsal, other, real = finished(rehearsal=True), finished(rehearsal=True), finished()
    for obj in (rehearsal, other, real):
        r.reconcile(obj, TFJOB, "event")
    assert (overdue(redis), would_delete(redis)) == (1, {TF: 2})
    # Booked without its dry-run entry: counted as overdue until repaired.
    redis.zrem(keys.dry_run(TF), rehearsal["metadata"]["uid"])
    assert (overdue(redis), would_delete(redis)) == (2, {TF: 1})
    assert file_dry_run(redis) == 2
    assert (overdue(redis), would_delete(redis)) == (1, {TF: 2})
    # Cancelled without taking its dry-run entry out: it would hide the real overdue deletion.
    redis.zrem(keys.PENDING_INDEX, other["metadata"]["uid"])
    assert (overdue(redis), would_delete(redis)) == (0, {TF: 2})
    assert file_dry_run(redis) == 1
    assert (overdue(redis), would_delete(redis)) == (1, {TF: 1})
    assert redis.zrange(keys.dry_run(TF), 0, -1) == [rehearsal["metadata"]["uid"].encode()]


# --- a Kind name is not a kind: batch/v1 Job and Volcano's Job ----------------------------------
JOBS = {"kinds": ["Job", "batch.volcano.sh/v1alpha1/Job"], "ttl": "1m", "dryRun": True}
VOLCANO_JOB = KindRegistry().get("batch.volcano.sh/v1alpha1", "Job")


def two_jobs(batch: int = 1, volcano: int = 2) -> list[dict]:
    """Finished an hour ago, a minute's TTL: due. Both are a `Job` by Kind."""
    return [
        with_server_fields(o)
        for o in [job_object(BATCH_JOB, f"b-{uuid.uuid4().hex[:8]}", "ml", at=time.time() - HOUR) for _ in range(batch)]
        + [volcano_job(f"v-{uuid.uuid4().hex[:8]}", "ml", at=time.time() - HOUR) for _ in range(volcano)]
    ]


def test_batch_and_volcano_jobs_dry_run_records_are_counted_apart(schedule, redis):
    r = reconciler(schedule, JOBS)
    registry = KindRegistry(parse_policy(JOBS).kinds)
    for obj in two_jobs():
        assert r.reconcile(obj, registry.get(obj["apiVersion"], obj["kind"]), "event").change is Change.SCHEDULED
    assert would_delete(redis) == {"Job.batch": 1, "Job.batch.volcano.sh": 2}
    assert redis.zcard(keys.dry_run("Job.batch")) == 1 and redis.zcard(keys.dry_run("Job.batch.volcano.sh")) == 2
    ops = Operations(redis, schedule, Audit(redis))
    # An operator names them as the policy does: `Job` is batch/v1's; Volcano's by its group.
    assert ops.would_delete(kind="Job") == 1
    assert ops.would_delete(kind="Job.batch.volcano.sh") == ops.would_delete(kind="batch.volcano.sh/v1alpha1/Job") == 2
    assert ops.would_delete("ml", kind="Job.batch.volcano.sh") == 2
    assert {p.ref.api_version for p in ops.pending(kind="Job")[0]} == {"batch/v1"}


# The last commit that kept the dry-run records by bare Kind: its code writes that layout here.
BARE_KIND_RELEASE = "c9057dc2c35d9660f88eecf80b5c125aab9c1fa4"
BOOK_BY_BARE_KIND = """
import json, sys
from redis import Redis
from jobttl.core import upgrade  # that release's layout: core/ had no rooms yet
from jobttl.core.audit import Audit
from jobttl.core.kinds import KindRegistry
from jobttl.core.policy import parse_policy
from jobttl.core.reconcile import Reconciler
from jobttl.core.schedule import Schedule

redis = Redis.from_url(sys.argv[1])
upgrade.ensure(redis)  # as each of its processes did at start
policy = parse_policy(json.loads(sys.argv[2]))
reconciler = Reconciler(Schedule(redis, "dry", retry_intervals=[]), Audit(redis), policy)
kinds = KindRegistry(policy.kinds)
for obj in json.load(sys.stdin):
    reconciler.reconcile(obj, kinds.get(obj["apiVersion"], obj["kind"]), "event")
print(json.dumps({k.decode(): redis.zcard(k) for k in redis.keys("jobttl:dry-run:*") if redis.type(k) == b"zset"}))
"""


@pytest.fixture(scope="module")
def bare_kind_release(tmp_path_factory) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", BARE_KIND_RELEASE], capture_output=True)
    if archive.returncode != 0:
        pytest.skip(f"the sources of {BARE_KIND_RELEASE} are not in this clone's history: {archive.stderr.decode()}")
    target = tmp_path_factory.mktemp("bare-kind")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(target, filter="data")
    return target


def book_with_bare_kinds(release: Path, server, objects: list[dict]) -> dict[str, int]:
    booked = subprocess.run(
        [sys.executable, "-c", BOOK_BY_BARE_KIND, server.url, json.dumps(JOBS)],
        cwd=release,
        env={"PYTHONPATH": str(release), "PATH": "/usr/bin:/bin"},
        input=json.dumps(objects),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert booked.returncode == 0, booked.stderr
    return json.loads(booked.stdout)


def test_dry_run_records_kept_by_bare_kind_are_filed_by_group_on_upgrade_and_after_a_rollout(
    bare_kind_release, server, schedule, redis
):
    # The earlier release counted both Jobs as one kind.
    assert book_with_bare_kinds(bare_kind_release, server, two_jobs()) == {"jobttl:dry-run:Job": 3}
    assert upgrade.ensure(redis) is True
    assert would_delete(redis) == {"Job.batch": 1, "Job.batch.volcano.sh": 2} and overdue(redis) == 0
    assert redis.keys("jobttl:dry-run:Job") == [] and not redis.exists(keys.LEGACY_DRY_RUN)
    assert upgrade.ensure(redis) is False  # marked: cheap from now on
    # During the rollout a process of the earlier release books one more, by bare Kind: a real
    # deletion overdue to the gauges, until the resync's repair files it.
    assert book_with_bare_kinds(bare_kind_release, server, two_jobs(batch=0, volcano=1))["jobttl:dry-run:Job"] == 1
    assert (overdue(redis), would_delete(redis)) == (1, {"Job.batch": 1, "Job.batch.volcano.sh": 2})
    assert file_dry_run(redis) == 4
    assert (overdue(redis), would_delete(redis)) == (0, {"Job.batch": 1, "Job.batch.volcano.sh": 3})
    assert redis.keys("jobttl:dry-run:Job") == [] and not redis.exists(keys.LEGACY_DRY_RUN)


def _registry(redis, queue: str):
    """A process's registry with the schedule's gauges, as the sink and the worker build it."""
    metrics = Metrics()
    schedule_gauges.register(metrics.registry, redis, queue)
    return metrics.registry
