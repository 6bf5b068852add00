"""Keeping the evidence, decided purely: the policy's blocks, archive plans and encodings, pod
stages, history limits and the DeletionScheduled message (jobttl.core.domain.rules.policy, .archive, .stages,
.keeplast)."""

import uuid
from pathlib import Path

import pytest

from jobttl.core.domain.decisions import archive
from jobttl.core.domain.wire import jsoncodec
from jobttl.core.domain.decisions.decision import Verdict, decide, keep_until
from jobttl.core.domain.decisions.keeplast import Member, is_limit_decision, limit_decision, membership, ranked
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.registry import ALL_KINDS, BATCH_JOB, TFJOB, TRAINJOB, WORKFLOW
from jobttl.core.domain.deploy.permissions import ARCHIVE_PERMISSIONS, POD_CLEANUP_PERMISSIONS, permissions
from jobttl.core.domain.rules.policy import ArchiveStore, KeepLast, PolicyError, load_policy, parse_policy
from jobttl.core.domain.decisions.stages import archived_pods, owned_pods, pod_stage, restarted, scheduled_message
from tests.fixtures import expected_kept, finished_status, job_object, rfc3339, tfjob, uniform_log, with_server_fields

FINISHED_AT = 1_900_000_000


def job(name="train", namespace="research", labels=None, outcome="Succeeded", at=FINISHED_AT, ttl=None):
    obj = with_server_fields(tfjob(name, namespace, ttl=ttl))
    obj["status"] = finished_status(at, outcome)
    if labels:
        obj["metadata"]["labels"] = labels
    return obj


# --- the policy --------------------------------------------------------------------------------------

EVIDENCE = {
    "ttl": "7d",
    "archive": {"store": "s3://evidence/jobttl", "logKiB": 64, "retention": "90d"},
    "podTTL": "1h",
    "rules": [
        {
            "name": "research",
            "namespaces": ["research"],
            "archive": {"logKiB": 512, "required": False},
            "podTTLAfterFailure": "1d",
            "keepLast": {"succeeded": 3, "failed": 5, "groupBy": "app"},
        },
        {"name": "quiet", "selector": {"matchLabels": {"quiet": "true"}}, "archive": False, "scheduledEvents": False},
    ],
}


def test_values_cascade_and_say_where_they_came_from():
    policy = parse_policy(EVIDENCE)
    assert policy.archive_store == ArchiveStore("s3://evidence/jobttl", retention=90 * 86400)
    research = policy.cleanup_effective("research", {})
    assert research.get("archive_log_kib").value == 512 and research.get("archive_log_kib").source == "rule research"
    assert research.get("archive_required").value is False
    assert research.get("pod_ttl").source == "policy" and research.get("pod_ttl_after_failure").value == 86400
    assert research.get("keep_last").value == KeepLast(3, 5, "app")
    quiet = policy.cleanup_effective("research", {"quiet": "true"})
    assert quiet.get("archive").value is False and quiet.get("scheduled_events").value is False
    assert policy.archiving and policy.pod_stages and policy.history_limits
    assert not (parse_policy({"ttl": "1d"}).archiving or parse_policy(None).pod_stages)


@pytest.mark.parametrize(
    "data, where",
    [
        ({"archive": {"logKiB": 0, "store": "/a"}}, "archive.logKiB"),
        ({"archive": {"store": "s3://"}}, "archive.store"),
        ({"archive": {"store": "gs://bucket"}}, "archive.store"),
        ({"archive": {"store": "s3://b", "maxBytes": "1Gi"}}, "archive.maxBytes"),
        ({"archive": {"store": "/a", "maxBytes": "lots"}}, "archive.maxBytes"),
        ({"archive": {"keep": True, "store": "/a"}}, "archive.keep"),
        ({"rules": [{"name": "r", "namespaces": ["a"], "archive": True}]}, "rules[0].archive"),
        ({"rules": [{"name": "r", "namespaces": ["a"], "archive": {"store": "/a"}}]}, "rules[0].archive.store"),
        ({"podTTL": "soon"}, "podTTL"),
        ({"keepLast": {}}, "keepLast"),
        ({"keepLast": {"succeeded": -1}}, "keepLast.succeeded"),
        ({"keepLast": {"failed": 2, "groupBy": ""}}, "keepLast.groupBy"),
        ({"scheduledEvents": "no"}, "scheduledEvents"),
    ],
)
def test_a_bad_value_names_the_field(data, where):
    with pytest.raises(PolicyError, match=f"policy: {where.replace('[', '.').replace(']', '.')}"):
        parse_policy(data)


def test_the_example_policy_shows_every_feature():
    policy = load_policy(Path(__file__).resolve().parents[2] / "examples" / "policy.yaml")
    assert policy.archiving and policy.pod_stages and policy.history_limits


def test_sizes_read_as_kubernetes_quantities():
    assert parse_policy({"archive": {"store": "/a", "maxBytes": "50Gi"}}).archive_store.max_bytes == 50 * 1024**3
    assert parse_policy({"archive": {"store": "/a", "maxBytes": 1000}}).archive_store.max_bytes == 1000


def test_the_worker_is_granted_pods_and_logs_only_for_the_features_it_uses():
    base = permissions("worker")
    assert "pods" not in base and "pods/log" not in base
    both = permissions("worker", archive=True, pod_cleanup=True)
    assert both["pods"] == ARCHIVE_PERMISSIONS["pods"] | POD_CLEANUP_PERMISSIONS["pods"]
    assert permissions("sink", archive=True, pod_cleanup=True) == {}


# --- archives -------------------------------------------------------------------------------------------


def test_a_plan_follows_the_policy():
    policy = parse_policy(EVIDENCE)
    assert archive.plan_for(job(), policy) == archive.ArchivePlan(log_kib=512, required=False, source="rule research")
    assert archive.plan_for(job(labels={"quiet": "true"}), policy) is None
    assert archive.plan_for(job(), parse_policy({"ttl": "1d"})) is None


def test_paths_name_the_job_and_its_uid():
    ref = JobRef("kubeflow.org/v1", "TFJob", "research", "mnist-v2", "0b5c4f3e-7f5a-4a1e-9c55-2b0f7a3e9d10")
    where = archive.folder(ref)
    assert where == "research/TFJob/mnist-v2-0b5c4f3e-7f5a-4a1e-9c55-2b0f7a3e9d10/"
    assert archive.split_folder(where.split("/")[2]) == ("mnist-v2", ref.uid)
    assert (
        archive.log_path("mnist-v2-worker-0", "tensorflow", previous=True)
        == "logs/mnist-v2-worker-0/tensorflow.previous.log"
    )
    with pytest.raises(ValueError):
        archive.log_path("../etc", "x")


# --- log tails: what is kept, and the requests that fetch it ------------------------------------------


@pytest.mark.parametrize("line_bytes", [1, 16, 68, 130, 500, 1024, 1025, 2048, 2049, 5000])
def test_a_long_log_keeps_the_whole_lines_covering_its_last_bytes(line_bytes):
    log = uniform_log(line_bytes, 20 * 1024)
    kept = archive.trim_tail(log, 1024)
    assert log.endswith(kept) and len(kept) == expected_kept(line_bytes, 1024) >= 1024
    assert len(kept) <= 2 * 1024


def test_a_log_no_longer_than_what_is_kept_is_kept_whole():
    assert archive.trim_tail(b"short\n", 100) == b"short\n"
    assert archive.trim_tail(b"x" * 100, 100) == b"x" * 100
    assert archive.trim_tail(b"", 100) == b""


def test_the_kept_part_starts_at_a_line_or_is_exactly_what_is_kept():
    # The 100th byte from the end is in "b...": its line begins 20 bytes earlier.
    log = b"a" * 50 + b"\n" + b"b" * 99 + b"\n" + b"c" * 19 + b"\n"
    assert archive.trim_tail(log, 100) == b"b" * 99 + b"\n" + b"c" * 19 + b"\n"
    # Right after a newline: exactly what is kept.
    assert archive.trim_tail(b"a" * 50 + b"\n" + b"b" * 99 + b"\n", 100) == b"b" * 99 + b"\n"
    # A line beginning exactly `keep` bytes before that point is still whole; one byte more, cut.
    assert archive.trim_tail(b"a\n" + b"b" * 200, 100) == b"b" * 200
    assert archive.trim_tail(b"a\n" + b"b" * 201, 100) == b"b" * 100
    # A log of one line (no newline at all) is whole from its start up to twice what is kept...
    assert archive.trim_tail(b"b" * 200, 100) == b"b" * 200
    # ... unless what is given is only its end (a stream's window): no line is known to begin there.
    assert archive.trim_tail(b"b" * 200, 100, starts_line=False) == b"b" * 100


def test_a_cut_line_keeps_whole_characters_and_never_fewer_bytes():
    one_line = "é".encode() * 500  # two bytes each, no newline
    kept = archive.trim_tail(one_line, 51)
    assert kept.decode() == "é" * 26 and len(kept) == 52  # one byte more, not one less
    kept = archive.trim_tail(one_line, 50)
    assert kept.decode() == "é" * 25


def kubelet(log: bytes, tail_lines: int, limit_bytes: int | None) -> bytes:
    """The kubelet's ReadLogs, for the sizing logic alone: the last lines, then at most the cap."""
    lines = log.splitlines(keepends=True)
    body = b"".join(lines[-tail_lines:] if tail_lines else [])
    return body if limit_bytes is None else body[:limit_bytes]


def fetch(log: bytes, keep: int) -> tuple[bytes, list[archive.LogRequest]]:
    """The worker's loop (jobttl.core.services.archiving.Archiver.tail), over `kubelet`."""
    request, asked = archive.first_log_request(keep), []
    while request is not None:
        asked.append(request)
        tail = archive.LogTail.for_keeping(keep)
        answer = kubelet(log, request.tail_lines, request.limit_bytes)
        for at in range(0, len(answer), 4096):
            tail.feed(answer[at : at + 4096])
        request = archive.next_log_request(request, keep, tail.bytes, tail.lines)
    return archive.trim_tail(tail.last, keep, tail.complete), asked


@pytest.mark.parametrize("line_bytes", [1, 16, 68, 130, 500, 5000, 70_000])
@pytest.mark.parametrize("keep_kib", [1, 16, 64])
def test_the_requests_find_the_last_bytes_whatever_the_lines_length(line_bytes, keep_kib):
    keep = keep_kib * 1024
    log = uniform_log(line_bytes, 6 * keep + line_bytes)
    kept, asked = fetch(log, keep)
    assert kept == archive.trim_tail(log, keep) and len(kept) == expected_kept(line_bytes, keep)
    assert len(asked) <= archive.MAX_LOG_TRIES + 1
    assert all(r.limit_bytes == archive.CAP_FACTOR * keep for r in asked[:-1])


def test_lines_of_68_bytes_take_two_requests_the_second_sized_from_the_first():
    """Issue 18: logKiB 16 and 68-byte lines kept 8,704 bytes (128 lines asked after a cut answer)."""
    keep = 16 * 1024
    kept, asked = fetch(uniform_log(68, 1024 * 1024), keep)
    assert len(kept) == 241 * 68 == 16_388
    # The cut answer: 65,536 bytes in 964 lines (963 whole, one cut): 482 lines make 2 x 16 KiB.
    assert [r.tail_lines for r in asked] == [keep, 482]
    assert asked[1].fewer_than == keep and asked[1].limit_bytes == 4 * keep


def test_a_log_shorter_than_what_is_kept_takes_one_request():
    for log in (b"", b"one line, no newline", uniform_log(68, 16 * 1024 - 68), uniform_log(1, 16 * 1024 - 1)):
        kept, asked = fetch(log, 16 * 1024)
        assert kept == log and len(asked) == 1


def test_varied_lines_still_keep_the_last_bytes():
    """Short lines near the end, long ones before: the first estimate misses, the bounds correct it."""
    log = uniform_log(4000, 400_000) + uniform_log(20, 2000) + uniform_log(300, 30_000) + uniform_log(9, 99)
    for keep in (1024, 16 * 1024, 64 * 1024):
        kept, asked = fetch(log, keep)
        assert kept == archive.trim_tail(log, keep) and len(kept) >= keep and len(asked) <= archive.MAX_LOG_TRIES + 1


def test_a_line_longer_than_the_cap_is_read_uncapped_through_a_window():
    keep = 1024
    log = b"start\n" + b"y" * (50 * keep) + b"\n"
    kept, asked = fetch(log, keep)
    assert kept == b"y" * (keep - 1) + b"\n"
    assert asked[-1] == archive.LogRequest(1, None, 0, 1, len(asked)) and len(asked) == 3


def test_a_cut_answer_asks_for_fewer_lines_and_a_short_one_for_more():
    keep = 1024
    first = archive.first_log_request(keep)
    assert (first.tail_lines, first.limit_bytes) == (keep, 4 * keep)
    assert archive.next_log_request(first, keep, 1000, 999) is None  # uncut and fewer bytes than lines: the whole log
    assert archive.next_log_request(first, keep, 3000, 30) is None  # uncut and enough
    fewer = archive.next_log_request(first, keep, 4 * keep, 40)  # cut: about 102 bytes a line
    assert fewer.tail_lines == 20 and (fewer.more_than, fewer.fewer_than) == (0, keep)
    more = archive.next_log_request(fewer, keep, 500, 20)  # 25 bytes a line near the end
    assert more.tail_lines == 82 and (more.more_than, more.fewer_than) == (20, keep)
    # An estimate outside what the answers showed halves the interval instead.
    assert archive.next_log_request(more, keep, 4 * keep, 2).tail_lines == 51
    # No count of lines left between the bounds, or tries spent: uncapped, and then done.
    last = archive.next_log_request(archive.LogRequest(2, 4 * keep, 1, None, 2), keep, 4 * keep, 0)
    assert last == archive.LogRequest(2, None, 1, 2, 3)
    assert archive.next_log_request(last, keep, 10 * keep, 2) is None
    spent = archive.LogRequest(50, 4 * keep, 10, 100, archive.MAX_LOG_TRIES)
    assert archive.next_log_request(spent, keep, 4 * keep, 10) == archive.LogRequest(50, None, 10, 50, 5)


def test_an_answer_is_the_whole_log_only_when_it_has_fewer_lines_than_asked_for():
    keep = 1024
    first = archive.first_log_request(keep)
    assert archive.whole_log(first, 1000, 40)  # fewer bytes than lines asked for
    assert archive.whole_log(first, 3000, 40) and not archive.whole_log(first, 3000, keep)
    assert not archive.whole_log(first, 4 * keep, 40)  # cut
    # After a cut answer the log is longer than any uncut one, however few newlines it shows
    # (a line of 20,000 bytes is two entries of the log file: tailLines=2 is that one line).
    sized = archive.LogRequest(2, 4 * keep, 0, keep, 2)
    assert not archive.whole_log(sized, 20_000, 1)
    assert not archive.whole_log(archive.LogRequest(1, None, 0, 1, 3), 50_000, 1)
    assert archive.whole_log(archive.LogRequest(10, None, 0, 10, 3), 9, 9)


def test_a_streamed_answer_holds_only_its_last_bytes():
    tail = archive.LogTail.for_keeping(1024)
    for _ in range(1000):
        tail.feed(b"z" * 99 + b"\n")
        assert len(tail.last) <= 2049
    assert (tail.bytes, tail.newlines, tail.lines, tail.complete) == (100_000, 1000, 1000, False)
    assert tail.last == ((b"z" * 99 + b"\n") * 1000)[-2049:]
    short = archive.LogTail(100)
    short.feed(b"a\nb")
    assert (short.last, short.lines, short.complete) == (b"a\nb", 2, True)


def test_a_manifest_nested_1500_deep_is_kept_with_a_note_not_a_crash():
    deep = leaf = {}
    for _ in range(1500):
        leaf["a"] = {}
        leaf = leaf["a"]
    obj = {**job(), "spec": {"deep": deep}}
    text, unkept = archive.to_yaml(obj, "manifest")
    assert b"kind: TFJob" in text and b"not kept, nested deeper than" in text
    assert unkept == [f"manifest: 1 parts nested deeper than {archive.MAX_DEPTH} levels were not kept"]
    assert archive.to_yaml(job(), "manifest")[1] == []


def test_the_index_of_a_later_stage_keeps_the_earlier_logs():
    ref = JobRef.of(job())
    plan = archive.ArchivePlan()
    pods = archive.Contents(files={"manifest.yaml": b"x"})
    pods.add_log("train-worker-0", "tensorflow", False, b"loss 0.1\n", False)
    earlier = jsoncodec.loads(archive.index(ref, pods, 100.0, "pods", plan))
    later = archive.Contents(files={"manifest.yaml": b"xy"}, unkept=["logs of p/c: the pod is gone"])
    document = jsoncodec.loads(archive.index(ref, later, 200.0, "job", plan, earlier))
    assert [e["pod"] for e in document["logs"]] == ["train-worker-0"]
    assert document["files"] == {"manifest.yaml": 2, "logs/train-worker-0/tensorflow.log": 9}
    assert [a["stage"] for a in document["archives"]] == ["pods", "job"]
    assert archive.choose_logs(document, pod="train-worker-0")[0]["path"] == "logs/train-worker-0/tensorflow.log"
    assert archive.choose_logs(document, container="other") == []


def test_an_archive_written_again_replaces_its_own_stages_entry():
    """A retry, or a changed object, writes a stage's archive again: index.json lists each stage once."""
    ref = JobRef.of(job())
    plan = archive.ArchivePlan()
    first = jsoncodec.loads(archive.index(ref, archive.Contents(files={"manifest.yaml": b"x"}), 100.0, "pods", plan))
    again = jsoncodec.loads(
        archive.index(ref, archive.Contents(files={"manifest.yaml": b"x"}), 150.0, "pods", plan, first)
    )
    assert again["archives"] == [{"stage": "pods", "at": 150.0}]
    job_stage = jsoncodec.loads(
        archive.index(ref, archive.Contents(files={"manifest.yaml": b"x"}), 200.0, "job", plan, again)
    )
    retried = jsoncodec.loads(
        archive.index(ref, archive.Contents(files={"manifest.yaml": b"x"}), 250.0, "job", plan, job_stage)
    )
    assert retried["archives"] == [{"stage": "pods", "at": 150.0}, {"stage": "job", "at": 250.0}]


def test_events_seen_by_an_earlier_stage_are_kept_once():
    a, b = {"metadata": {"uid": "a"}, "reason": "Created"}, {"metadata": {"uid": "b"}, "reason": "Done"}
    merged = archive.merge_events(archive.earlier_events(archive.to_yaml([a, b], "events")[0]), [b])
    assert [e["reason"] for e in merged] == ["Created", "Done"]


def test_retention_removes_the_old_then_the_oldest_beyond_the_cap():
    now = 1000.0 * 86400
    stored = [archive.Stored(f"n/K/j{i}/", now - i * 86400, 100) for i in range(10)]
    assert archive.expired(stored, now, 7 * 86400, None) == [f"n/K/j{i}/" for i in (9, 8)]
    assert archive.expired(stored, now, None, 250) == [f"n/K/j{i}/" for i in range(9, 1, -1)]
    assert archive.expired(stored, now, None, None) == []


# --- pods stages ----------------------------------------------------------------------------------------


def test_the_pods_go_at_their_own_ttl_and_the_job_keeps_its_own():
    policy = parse_policy(EVIDENCE)
    obj = job(namespace="elsewhere")
    decision = decide(obj, TFJOB, policy)
    stage = pod_stage(obj, TFJOB, policy, decision)
    assert stage.reason == "expires" and stage.decision.expires_at == FINISHED_AT + 3600
    assert decision.expires_at == FINISHED_AT + 7 * 86400
    assert stage.decision.ttl_source == "podTTL of policy"
    failed = job(outcome="Failed")
    stage = pod_stage(failed, TFJOB, policy, decide(failed, TFJOB, policy))
    assert stage.decision.ttl == 86400 and stage.decision.ttl_source == "podTTLAfterFailure of rule research"


def test_no_pods_stage_when_it_would_not_come_first_or_is_not_safe():
    policy = parse_policy({**EVIDENCE, "ttl": "30m"})
    obj = job(namespace="elsewhere")
    assert pod_stage(obj, TFJOB, policy, decide(obj, TFJOB, policy)).reason == "pods-with-job"
    trainjob = job_object(TRAINJOB, "t", "elsewhere", at=FINISHED_AT)
    trainjob["metadata"]["uid"] = str(uuid.uuid4())
    assert pod_stage(trainjob, TRAINJOB, policy, decide(trainjob, TRAINJOB, policy)).reason == "pods-unsafe"
    kept = job(namespace="elsewhere")
    kept["metadata"]["annotations"] = {"jobttl.io/keep": "true"}
    assert pod_stage(kept, TFJOB, policy, decide(kept, TFJOB, policy)).reason == Verdict.KEPT.value
    no_ttl = parse_policy({"podTTL": "1h"})  # the job is kept, its pods are not
    assert pod_stage(obj, TFJOB, no_ttl, decide(obj, TFJOB, no_ttl)).decision.expires_at == FINISHED_AT + 3600


def test_only_kinds_whose_controllers_leave_finished_jobs_alone_allow_it():
    assert {k.kind for k in ALL_KINDS if k.pod_cleanup_safe} == {
        "TFJob",
        "PyTorchJob",
        "MPIJob",
        "XGBoostJob",
        "PaddleJob",
        "JAXJob",
        "Job",
        "Workflow",
    }
    assert BATCH_JOB.pod_cleanup_safe and WORKFLOW.pod_cleanup_safe and not TRAINJOB.pod_cleanup_safe


def pod(name, owner_uid, label="train", controller=True, kind="TFJob"):
    return {
        "metadata": {
            "name": name,
            "uid": str(uuid.uuid4()),
            "labels": {TFJOB.pod_label: label},
            "ownerReferences": [{"kind": kind, "uid": owner_uid, "controller": controller}],
        },
        "spec": {"containers": [{"name": "tensorflow"}]},
        "status": {"containerStatuses": [{"name": "tensorflow", "restartCount": 1 if name.endswith("1") else 0}]},
    }


def test_only_the_jobs_own_pods_are_ever_chosen():
    uid = str(uuid.uuid4())
    pods = [
        pod("train-worker-0", uid),
        pod("train-worker-1", uid),
        pod("impostor", str(uuid.uuid4())),
        pod("adopted", uid, controller=False),
        pod("relabelled", uid, label="other"),
        pod("other-kind", uid, kind="PyTorchJob"),
    ]
    assert [p["metadata"]["name"] for p in owned_pods(pods, TFJOB, "train", uid)] == [
        "train-worker-0",
        "train-worker-1",
    ]
    assert not restarted(pods[0], "tensorflow") and restarted(pods[1], "tensorflow")
    # Logs are read by the label, less the pods another job of this kind controls.
    assert [p["metadata"]["name"] for p in archived_pods(pods, TFJOB, uid)] == [
        "train-worker-0",
        "train-worker-1",
        "adopted",
        "relabelled",
        "other-kind",
    ]


def test_the_scheduled_message_says_when_and_why():
    assert (
        scheduled_message("TFJob", "job", 1_896_048_000, 7 * 86400, "ttl of rule research")
        == "jobttl will delete this TFJob at 2030-01-31T00:00:00Z (TTL 7d from ttl of rule research)"
    )
    assert (
        scheduled_message("TFJob", "pods", 1_896_048_000, 3600, "podTTL of policy", dry_run=True)
        == "jobttl would delete (dry run) the pods of this TFJob at 2030-01-31T00:00:00Z (TTL 1h from podTTL of policy)"
    )
    assert scheduled_message("TFJob", "job", 1_896_048_000, 60, "keepLast of rule r (3 succeeded)").endswith(
        "(keepLast of rule r (3 succeeded))"
    )


# --- history limits ---------------------------------------------------------------------------------------


def group_of(n, policy, namespace="research", app="mnist", outcome="Succeeded", start=FINISHED_AT):
    objs = [job(f"run-{i}", namespace, {"app": app}, outcome, start + i * 60) for i in range(n)]
    return objs, [membership(o, TFJOB, policy, decide(o, TFJOB, policy)) for o in objs]


def test_the_oldest_beyond_the_limit_are_due_when_they_fell_beyond_it():
    policy = parse_policy(EVIDENCE)
    objs, members = group_of(5, policy)
    ranks = ranked(members)
    # run-4 is the newest; limit 3: run-1 fell beyond when run-4 finished, run-0 when run-3 did.
    assert {o["metadata"]["name"]: ranks[o["metadata"]["uid"]] for o in objs} == {
        "run-4": (0, None),
        "run-3": (1, None),
        "run-2": (2, None),
        "run-1": (3, FINISHED_AT + 4 * 60),
        "run-0": (4, FINISHED_AT + 3 * 60),
    }
    decision = limit_decision(members[0], 4, FINISHED_AT + 180, decide(objs[0], TFJOB, policy))
    assert decision.expires_at == FINISHED_AT + 180 and is_limit_decision(decision)
    assert decision.ttl_source == "keepLast of rule research (3 succeeded)"


def test_groups_are_apart_by_namespace_label_outcome_and_rule():
    policy = parse_policy(EVIDENCE)
    _, a = group_of(4, policy, app="a")
    _, b = group_of(2, policy, app="b")
    _, failed = group_of(5, policy, app="a", outcome="Failed")
    ranks = ranked(a + b + failed)
    assert sum(1 for m in a + b + failed if ranks[m.uid][1] is not None) == 1  # only a's oldest (failed keep 5)
    unlabelled = job("lone", "research")
    assert membership(unlabelled, TFJOB, policy, decide(unlabelled, TFJOB, policy)) is None
    elsewhere = job("x", "elsewhere", {"app": "a"})
    assert membership(elsewhere, TFJOB, policy, decide(elsewhere, TFJOB, policy)) is None


def test_a_ttl_earlier_than_the_limit_stays():
    policy = parse_policy(EVIDENCE)
    obj = job("early", labels={"app": "a"}, ttl=60)
    member = membership(obj, TFJOB, policy, decide(obj, TFJOB, policy))
    assert limit_decision(member, 5, FINISHED_AT + 3600, decide(obj, TFJOB, policy)).expires_at == FINISHED_AT + 60


def test_ties_are_broken_like_redis_breaks_them():
    policy = parse_policy(EVIDENCE)
    objs = [job(f"same-{i}", labels={"app": "t"}) for i in range(4)]
    members = [membership(o, TFJOB, policy, decide(o, TFJOB, policy)) for o in objs]
    ranks = ranked(members)
    order = sorted(members, key=lambda m: m.uid, reverse=True)
    assert [ranks[m.uid][0] for m in order] == [0, 1, 2, 3]


# --- jobttl.io/keep-until: every early deletion waits for it --------------------------------------------


def kept_until(at, **kw):
    obj = job(**kw)
    obj["metadata"]["annotations"] = {"jobttl.io/keep-until": rfc3339(at)}
    return obj


def test_keep_until_postpones_the_pods_stage():
    policy = parse_policy(EVIDENCE)  # podTTL 1h, ttl 7d
    obj = kept_until(FINISHED_AT + 2 * 3600, namespace="elsewhere")
    stage = pod_stage(obj, TFJOB, policy, decide(obj, TFJOB, policy))
    assert stage.reason == "expires" and stage.decision.expires_at == FINISHED_AT + 2 * 3600
    assert stage.decision.ttl == 2 * 3600
    assert stage.decision.ttl_source == "podTTL of policy, postponed by annotation jobttl.io/keep-until"
    # Kept until before the podTTL is up: the podTTL stands.
    early = kept_until(FINISHED_AT + 60, namespace="elsewhere")
    assert pod_stage(early, TFJOB, policy, decide(early, TFJOB, policy)).decision.expires_at == FINISHED_AT + 3600
    # Kept past the job's own TTL: the pods go with the job, then.
    late = kept_until(FINISHED_AT + 8 * 86400, namespace="elsewhere")
    assert pod_stage(late, TFJOB, policy, decide(late, TFJOB, policy)).reason == "pods-with-job"


def test_keep_until_is_capped_by_max_ttl_and_an_invalid_one_keeps_nothing_early():
    policy = parse_policy({**EVIDENCE, "ttl": "2h", "maxTTL": "3h"})
    obj = kept_until(FINISHED_AT + 86400, namespace="elsewhere")
    assert keep_until(obj, TFJOB, policy) == FINISHED_AT + 3 * 3600
    assert keep_until(job(namespace="elsewhere"), TFJOB, policy) is None
    bad = job(namespace="elsewhere")
    bad["metadata"]["annotations"] = {"jobttl.io/keep-until": "next tuesday"}
    assert keep_until(bad, TFJOB, policy) is None
    assert decide(bad, TFJOB, policy).verdict is Verdict.INVALID_TTL
    assert pod_stage(bad, TFJOB, policy, decide(bad, TFJOB, policy)).decision.verdict is not Verdict.EXPIRES


def test_keep_until_postpones_a_keep_last_deletion_and_survives_the_index_record():
    policy = parse_policy(EVIDENCE)  # research keeps 3 succeeded per app
    obj = kept_until(FINISHED_AT + 86400, labels={"app": "a"})
    member = membership(obj, TFJOB, policy, decide(obj, TFJOB, policy))
    assert member.keep_until == FINISHED_AT + 86400
    again = Member.from_record(member.uid, member.record())  # what the index keeps about it
    assert again.keep_until == FINISHED_AT + 86400
    for m in (member, again):
        decision = limit_decision(m, 3, FINISHED_AT + 60, decide(obj, TFJOB, policy))
        assert decision.expires_at == FINISHED_AT + 86400 and is_limit_decision(decision)
        assert decision.reason.endswith("postponed by annotation jobttl.io/keep-until")
    # Kept until before it fell beyond the limit: due when it fell beyond.
    early = kept_until(FINISHED_AT + 30, labels={"app": "a"})
    member = membership(early, TFJOB, policy, decide(early, TFJOB, policy))
    assert limit_decision(member, 3, FINISHED_AT + 60, decide(early, TFJOB, policy)).expires_at == FINISHED_AT + 60


def test_owned_pods_keeps_pods_created_after_the_job_finished():
    uid = str(uuid.uuid4())
    pods = [pod("before", uid), pod("at-the-finish", uid), pod("after", uid), pod("undated", uid)]
    for p, at in zip(pods, (FINISHED_AT - 60, FINISHED_AT, FINISHED_AT + 1, None)):
        if at is not None:
            p["metadata"]["creationTimestamp"] = rfc3339(at)
    assert [p["metadata"]["name"] for p in owned_pods(pods, TFJOB, "train", uid, created_by=FINISHED_AT)] == [
        "before",
        "at-the-finish",
    ]
    assert len(owned_pods(pods, TFJOB, "train", uid)) == 4, "without a finish time, by owner alone"
