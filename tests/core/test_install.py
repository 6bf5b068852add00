"""The install record behind the first-run review (jobttl.core.services.install).

The rule is pure and table-tested; the record's reading and writing goes to a real Redis and
to the emulator's ConfigMaps over HTTP with the kubernetes client, as the worker does.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from jobttl.core.store import keys
from jobttl.core.services.install import CONFIGMAP, FIRST_INSTALL, RAN_BEFORE, InstallRecord, InstallReview
from jobttl.core.kube.client import KubeClient, load_api_client
from jobttl_emulator import CONFIG_MAP
from tests.services import start_emulator

INSTALLED = 1_900_000_000


@pytest.mark.parametrize(
    "record, due, held",
    [
        (InstallRecord(INSTALLED), INSTALLED - 86400 * 30, True),  # finished last month: overdue at install
        (InstallRecord(INSTALLED), INSTALLED, True),  # due at the very second of install: overdue, as decide counts
        (InstallRecord(INSTALLED), INSTALLED + 1, False),  # due after install: jobs finishing from now on
        (InstallRecord(INSTALLED).reviewed("operator", INSTALLED + 60), INSTALLED - 86400, False),  # reviewed: go
        (InstallRecord(INSTALLED, RAN_BEFORE, INSTALLED, "ran-before"), INSTALLED - 86400, False),  # an upgrade
    ],
)
def test_what_the_first_run_review_holds(record, due, held):
    assert record.holds(due) is held


def test_the_record_reads_back_from_its_configmap_data():
    record = InstallRecord(INSTALLED).reviewed("operator: jobttl resync --confirm abc", INSTALLED + 90)
    assert record.as_data() == {
        "installedAt": "2030-03-17T17:46:40Z",
        "origin": FIRST_INSTALL,
        "reviewedAt": "2030-03-17T17:48:10Z",
        "reviewedBy": "operator: jobttl resync --confirm abc",
    }
    assert InstallRecord.from_data(record.as_data()) == record
    assert InstallRecord.from_data({k.encode(): v.encode() for k, v in record.as_data().items()}) == record


@pytest.mark.parametrize(
    "data, named",
    [
        ({}, "installedAt: missing"),
        ({"installedAt": "last tuesday"}, "installedAt: not an RFC 3339 time"),
        ({"installedAt": "2030-01-01T00:00:00Z", "reviewedAt": "soon"}, "reviewedAt"),
    ],
)
def test_a_broken_record_is_refused_naming_the_field(data, named):
    with pytest.raises(ValueError, match=named):
        InstallRecord.from_data(data)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    emulator = start_emulator(tmp_path_factory.mktemp("install"), (CONFIG_MAP,))
    yield emulator
    emulator.stop()


@pytest.fixture
def review(cluster, redis):
    """A review in a namespace of its own (one ConfigMap per namespace), on a flushed Redis."""
    redis.flushdb()
    kube = KubeClient(load_api_client(str(cluster.kubeconfig)), component="worker")
    return InstallReview(redis, kube, f"jobttl-{uuid.uuid4().hex[:6]}")


def configmap(review: InstallReview) -> dict | None:
    return review.kube.get_configmap(review.namespace, CONFIGMAP)


def test_a_first_install_is_recorded_in_the_cluster_and_mirrored_in_redis(review, redis):
    record = review.establish(INSTALLED)
    assert record == InstallRecord(INSTALLED, FIRST_INSTALL) and record.under_review
    assert configmap(review)["data"] == {"installedAt": "2030-03-17T17:46:40Z", "origin": FIRST_INSTALL}
    assert InstallRecord.from_data(redis.hgetall(keys.INSTALL)) == record
    assert review.holds(INSTALLED - 10) and not review.holds(INSTALLED + 10)


def test_a_second_start_keeps_the_first_install_time(review):
    review.establish(INSTALLED)
    assert review.establish(INSTALLED + 3600).installed_at == INSTALLED


def test_a_redis_that_lost_its_data_is_not_a_first_install(review, redis):
    review.establish(INSTALLED)
    review.mark_reviewed("operator", INSTALLED + 60)
    redis.flushdb()  # Redis restarted without its data: no audit trail, no mirror
    record = InstallReview(redis, review.kube, review.namespace).establish(INSTALLED + 86400)
    assert record.installed_at == INSTALLED and not record.under_review and record.reviewed_by == "operator"
    assert not InstallRecord.from_data(redis.hgetall(keys.INSTALL)).under_review


def test_a_worker_whose_redis_lost_the_mirror_reads_the_cluster_again(review, redis):
    review.establish(INSTALLED)
    redis.delete(keys.INSTALL)
    assert review.holds(INSTALLED - 10), "still under review: the ConfigMap says so"
    assert redis.exists(keys.INSTALL)


def test_an_audit_trail_of_a_worker_means_jobttl_ran_before(review, redis):
    redis.xadd(keys.AUDIT_STREAM, {"event": "deleted", "by": "worker"})  # jobttl 0.2, which kept no record
    record = review.establish(INSTALLED)
    assert record.origin == RAN_BEFORE and not record.under_review
    assert configmap(review)["data"]["origin"] == RAN_BEFORE


def test_a_sink_alone_does_not_make_it_an_upgrade(review, redis):
    """Events booked before the first worker started: the sink's entries prove no worker ever ran."""
    redis.xadd(keys.AUDIT_STREAM, {"event": "scheduled", "by": "event"})
    assert review.establish(INSTALLED).under_review


def test_workers_starting_together_agree_on_one_record(review, redis):
    records = []
    starts = [
        threading.Thread(
            target=lambda at=at: records.append(InstallReview(redis, review.kube, review.namespace).establish(at))
        )
        for at in (INSTALLED, INSTALLED + 5)
    ]
    for t in starts:
        t.start()
    for t in starts:
        t.join()
    assert len({r.installed_at for r in records}) == 1
    assert records[0].installed_at == InstallRecord.from_data(configmap(review)["data"]).installed_at


def test_the_review_is_marked_done_in_the_cluster(review, redis):
    review.establish(INSTALLED)
    review.mark_reviewed("operator: jobttl resync --confirm 0123abcd", INSTALLED + 60)
    data = configmap(review)["data"]
    assert data["reviewedBy"] == "operator: jobttl resync --confirm 0123abcd"
    assert data["reviewedAt"] == "2030-03-17T17:47:40Z"
    assert not review.holds(INSTALLED - 10)


def test_a_hand_broken_configmap_stops_the_start_naming_it(review):
    review.kube.create_configmap(review.namespace, CONFIGMAP, {"installedAt": "yesterday"})
    with pytest.raises(ValueError, match=f"ConfigMap {review.namespace}/{CONFIGMAP}: data.installedAt"):
        review.establish(INSTALLED)


def test_switched_off_nothing_is_recorded_or_held(cluster, redis):
    redis.flushdb()
    kube = KubeClient(load_api_client(str(cluster.kubeconfig)), component="worker")
    off = InstallReview(redis, kube, "jobttl-off", enabled=False)
    assert off.establish(INSTALLED) is None and not off.holds(0)
    assert kube.get_configmap("jobttl-off", CONFIGMAP) is None and not redis.exists(keys.INSTALL)


# --- issue 26 §2: what "ran before" takes, and a review that outlives the loss of both records ----------


@pytest.mark.parametrize(
    "entry",
    [
        {"event": "resync", "status": "incomplete"},  # a `jobttl resync` that could not read the ConfigMap
        {"event": "would-delete", "by": "worker"},  # a dry run deletes nothing
        {"event": "refused", "by": "worker"},
        {"event": "deleted", "by": "worker", "installRecord": "kept"},  # this release's, under a record since lost
    ],
)
def test_only_a_deletion_by_a_release_without_install_records_means_jobttl_ran_before(review, redis, entry):
    redis.xadd(keys.AUDIT_STREAM, entry)
    redis.set(keys.RESYNC_LAST_SUCCESS, "1")  # a resync completing proves nobody reviewed anything
    record = review.establish(INSTALLED)
    assert record.origin == FIRST_INSTALL and record.under_review


def test_this_releases_deletions_carry_the_mark_that_tells_them_from_0_2s():
    from jobttl.core.domain.wire.identity import JobRef
    from jobttl.core.store.audit import entry_fields

    ref = JobRef("kubeflow.org/v1", "TFJob", "ml", "a", "u1")
    for event in ("deleted", "delete-requested", "pods-deleted"):
        assert entry_fields(event, ref, by="worker")["installRecord"] == "kept"
    assert "installRecord" not in entry_fields("scheduled", ref, by="event")


def test_with_the_configmap_and_redis_both_gone_the_next_start_is_a_first_install(review, redis):
    review.establish(INSTALLED)
    review.mark_reviewed("operator", INSTALLED + 60)
    redis.xadd(keys.AUDIT_STREAM, {"event": "deleted", "by": "worker", "installRecord": "kept"})
    _delete_configmap(review)
    redis.delete(keys.INSTALL)
    record = InstallReview(redis, review.kube, review.namespace).establish(INSTALLED + 86400)
    assert record.origin == FIRST_INSTALL and record.under_review and record.installed_at == INSTALLED + 86400


def test_a_running_worker_keeps_an_open_review_when_both_records_are_lost(review, redis):
    review.establish(INSTALLED)
    redis.flushdb()
    redis.xadd(keys.AUDIT_STREAM, {"event": "deleted", "by": "worker", "installRecord": "kept"})  # since the flush
    _delete_configmap(review)
    assert review.holds(INSTALLED - 10, "kubeflow.org/v1/TFJob"), "still the review it knew"
    assert InstallRecord.from_data(configmap(review)["data"]).under_review


def _delete_configmap(review: InstallReview) -> None:
    from kubernetes import client

    client.CoreV1Api(review.kube.api_client).delete_namespaced_config_map(CONFIGMAP, review.namespace)


@pytest.mark.parametrize(
    "record, due, kind, held",
    [
        (
            InstallRecord(INSTALLED).reviewed("op", INSTALLED + 1, frozenset({"batch/v1/Job"})),
            INSTALLED - 5,
            "batch/v1/Job",
            True,
        ),  # a kind the confirmation did not cover
        (
            InstallRecord(INSTALLED).reviewed("op", INSTALLED + 1, frozenset({"batch/v1/Job"})),
            INSTALLED - 5,
            "kubeflow.org/v1/TFJob",
            False,
        ),  # one it covered
        (
            InstallRecord(INSTALLED).reviewed("op", INSTALLED + 1, frozenset({"batch/v1/Job"})),
            INSTALLED - 5,
            None,
            True,
        ),
        (
            InstallRecord(INSTALLED).reviewed("op", INSTALLED + 1, frozenset({"batch/v1/Job"})),
            INSTALLED + 5,
            "batch/v1/Job",
            False,
        ),  # due after install
        (
            InstallRecord(INSTALLED)
            .reviewed("op", INSTALLED + 1, frozenset({"batch/v1/Job"}))
            .reviewed("op", INSTALLED + 2, frozenset()),
            INSTALLED - 5,
            "batch/v1/Job",
            False,
        ),  # covered later
        (
            InstallRecord(INSTALLED)
            .reviewed("op", INSTALLED + 1, frozenset({"batch/v1/Job"}))
            .reviewed("op", INSTALLED + 2, frozenset({"kubeflow.org/v1/TFJob"})),
            INSTALLED - 5,
            "kubeflow.org/v1/TFJob",
            False,
        ),  # a reviewed kind never comes back under review
    ],
)
def test_what_a_partial_review_holds(record, due, kind, held):
    assert record.holds(due, kind) is held
    assert InstallRecord.from_data(record.as_data()) == record
