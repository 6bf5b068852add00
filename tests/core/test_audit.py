"""What the audit trail, the history cards and the tombstones keep (jobttl.core.store.audit), in real Redis."""

import json
import uuid

from jobttl.core.store.audit import Audit
from jobttl.core.domain.wire.identity import JobRef


def ref(name="secretive"):
    return JobRef("kubeflow.org/v1", "TFJob", "team", f"{name}-{uuid.uuid4().hex[:6]}", str(uuid.uuid4()))


OBJECT = {
    "metadata": {
        "labels": {"team": "a"},
        "annotations": {
            "db-password": "hunter2",
            "owner": "ana",
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
        },
    },
    "status": {"conditions": [{"type": "Succeeded", "status": "True"}], "completionTime": "2030-01-01T00:00:00Z"},
}


def test_tombstones_keep_no_annotation_values_unless_configured_by_key(redis):
    kept = json.loads(Audit(redis).tombstone(ref(), OBJECT, 1.0))
    assert kept["annotations"] == {} and kept["labels"] == {"team": "a"}
    assert kept["status"]["completionTime"] == "2030-01-01T00:00:00Z"
    chosen = json.loads(Audit(redis, tombstone_annotations=("owner",)).tombstone(ref(), OBJECT, 1.0))
    assert chosen["annotations"] == {"owner": "ana"}


def test_a_status_too_large_or_too_deep_to_keep_is_recorded_as_not_kept(redis):
    deep = {}
    for _ in range(400):
        deep = {"a": deep}
    kept = json.loads(Audit(redis).tombstone(ref(), {"metadata": {}, "status": {"conditions": deep}}, 1.0))
    assert "unkept" in kept
    job = ref()
    huge = json.loads(Audit(redis).tombstone(job, {"metadata": {}, "status": {"message": "x" * 100_000}}, 1.0))
    assert "unkept" in huge
    assert huge | {**job.as_dict(), "deletedAt": 1.0, "status": {}, "labels": {}} == huge, "still says who and when"


def test_each_job_name_has_its_own_history_newest_first(redis):
    audit, job, other = Audit(redis), ref("one"), ref("two")
    for event in ("scheduled", "moved", "delete-requested"):
        audit.record(event, job, by="test")
    audit.record("scheduled", other, by="test")
    assert [e.fields["event"] for e in audit.history(job.namespace, job.name)] == [
        "delete-requested",
        "moved",
        "scheduled",
    ]
    assert audit.decisions(job.namespace, job.name)[job.uid]["event"] == "delete-requested"


def test_entries_and_decisions_read_back_with_the_types_they_were_recorded_with(redis):
    audit, job = Audit(redis), ref("typed")
    audit.record(
        "delete-requested",
        job,
        by="worker",
        due=1796121233,
        ttl=20,
        lateness=0.25,
        dryRun=False,
        rules=["short-lived"],
        retriesLeft=0,
        reason="ttl-expired",
    )
    [entry] = [e.as_dict() for e in audit.history(job.namespace, job.name)]
    assert redis.xrange("jobttl:audit", entry["id"], entry["id"])[0][1][b"dryRun"] == b"false", "stored as a string"
    assert (
        entry
        | {
            "due": 1796121233,
            "dueTime": "2026-12-01T10:33:53Z",
            "ttl": 20,
            "lateness": 0.25,
            "dryRun": False,
            "rules": ["short-lived"],
            "retriesLeft": 0,
            "reason": "ttl-expired",
            "name": job.name,
        }
        == entry
    )
    assert isinstance(entry["at"], float) and entry["atTime"].endswith("Z")
    decision = audit.decisions(job.namespace, job.name)[job.uid]
    assert (
        decision
        | {
            "event": "delete-requested",
            "due": 1796121233,
            "dueTime": "2026-12-01T10:33:53Z",
            "reason": "ttl-expired",
            "atTime": entry["atTime"],
        }
        == decision
    )
