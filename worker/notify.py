"""Telling people: a Kubernetes Event for each deletion and each failure, and an optional
CloudEvent announcing each deletion ahead of time.

Users look for their job with ``kubectl get events``; once jobttl has deleted it, the
Event (reason ``SuccessfulDeleteJob``, like the training operator's own) says who deleted
it and why, and a ``FailedDeleteJob`` warning says why a job that should be gone is not.
Events are best effort: failing to record one never fails or repeats a deletion.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timezone

import requests
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from jobttl import logs
from worker.decision import JobRef

log = logging.getLogger("jobttl.notify")

COMPONENT = "jobttl"
# Beyond worker.kube.PERMISSIONS (verbs on job kinds), the worker creates core Events.
EVENT_VERBS = frozenset({"create"})


class EventRecorder:
    def __init__(self, api_client: client.ApiClient, timeout: int = 10):
        self.api = client.CoreV1Api(api_client)
        self.timeout = timeout

    def record(self, ref: JobRef, reason: str, message: str, warning: bool = False) -> None:
        now = datetime.now(timezone.utc)
        event = client.CoreV1Event(
            api_version="v1",
            kind="Event",
            metadata=client.V1ObjectMeta(generate_name=f"{ref.name}.", namespace=ref.namespace),
            involved_object=client.V1ObjectReference(api_version=ref.api_version, kind=ref.kind, name=ref.name,
                                                     namespace=ref.namespace, uid=ref.uid),
            reason=reason,
            message=message[:1024],  # the API server rejects very long messages
            type="Warning" if warning else "Normal",
            source=client.V1EventSource(component=COMPONENT),
            reporting_component=COMPONENT,
            reporting_instance=COMPONENT,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        try:
            self.api.create_namespaced_event(ref.namespace, event, _request_timeout=self.timeout)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            logs.record(log, "event-not-recorded", ref.as_dict(), logging.WARNING, reason=reason,
                        detail=str(getattr(exc, "reason", exc)))


# The CloudEvent type announcing a deletion; under a prefix jobttl owns.
UPCOMING_TYPE = "io.jobttl.deletion.upcoming"


def announce(url: str, ref: JobRef, subject: str, due: int, details: dict, timeout: float = 10) -> None:
    """POST a binary-mode CloudEvent saying `ref` will be deleted at `due`.

    Teams point this at a Knative Broker (or any HTTP endpoint) to archive logs or to
    postpone the deletion in time. A failure raises, so RQ retries it.
    """
    due_time = datetime.fromtimestamp(due, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    headers = {
        "ce-specversion": "1.0",
        "ce-id": str(uuid.uuid4()),
        "ce-source": f"/jobttl/{ref.namespace}",
        "ce-type": UPCOMING_TYPE,
        "ce-subject": subject,
        "ce-time": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "content-type": "application/json",
    }
    response = requests.post(url, headers=headers, json={**ref.as_dict(), "deletionTime": due_time, **details},
                             timeout=timeout)
    response.raise_for_status()
