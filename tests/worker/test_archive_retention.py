"""The archive's retention on a real directory store: old archives go, then the oldest beyond the cap."""

import time
import uuid

from jobttl.core.domain.decisions import archive
from jobttl.core.kube.archivestore import DirectoryStore, latest
from jobttl.core.store.audit import Audit
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.rules.policy import ArchiveStore
from jobttl.core.services.archiving import prune


def write(store, name, at, size):
    ref = JobRef("kubeflow.org/v1", "TFJob", "research", name, str(uuid.uuid4()))
    contents = archive.Contents(files={"manifest.yaml": b"x" * size})
    contents.files[archive.INDEX] = archive.index(ref, contents, at, "job", archive.ArchivePlan())
    store.write(archive.folder(ref), contents.files)
    return archive.folder(ref)


def test_retention_by_age_then_by_size(tmp_path, redis):
    store = DirectoryStore(str(tmp_path))
    now = time.time()
    ancient, old, new = (
        write(store, "a", now - 40 * 86400, 10),
        write(store, "b", now - 2 * 86400, 1000),
        write(store, "c", now, 1000),
    )
    removed = prune(store, ArchiveStore(str(tmp_path), retention=30 * 86400, max_bytes=1800), Audit(redis), now=now)
    assert removed == [ancient, old]
    assert [s.folder for s in store.stored()] == [new]
    assert latest(store, "research", "c")[0] == new and latest(store, "research", "b") is None
    assert prune(store, ArchiveStore(str(tmp_path)), Audit(redis)) == []  # no retention set: nothing goes


def test_the_archive_of_a_volcano_job_is_told_from_a_batch_jobs_of_the_same_name(tmp_path):
    """Both are a `Job`: their folders share <namespace>/Job/, and `jobttl logs --kind` names them
    as the policy does (a bare Job is batch/v1's)."""
    store, now = DirectoryStore(str(tmp_path)), time.time()

    def archived(api_version: str, at: float) -> str:
        ref = JobRef(api_version, "Job", "research", "twin", str(uuid.uuid4()))
        contents = archive.Contents(files={"manifest.yaml": b"x"})
        contents.files[archive.INDEX] = archive.index(ref, contents, at, "job", archive.ArchivePlan())
        store.write(archive.folder(ref), contents.files)
        return archive.folder(ref)

    batch, volcano = archived("batch/v1", now - 60), archived("batch.volcano.sh/v1alpha1", now)
    assert latest(store, "research", "twin")[0] == volcano  # any kind: the newest
    assert latest(store, "research", "twin", "Job")[0] == batch
    assert latest(store, "research", "twin", "Job.batch.volcano.sh")[0] == volcano
    assert latest(store, "research", "twin", "batch/v1/Job")[0] == batch
