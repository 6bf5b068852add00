"""Telling people in the cluster: a Kubernetes Event for each deletion and each failure.

Users look for their job with ``kubectl get events``; once jobttl has deleted it, the
Event (reason ``SuccessfulDeleteJob``, like the training operator's own) says who deleted
it and why, and a ``FailedDeleteJob`` warning says why a job that should be gone is not.
Events are best effort: failing to record one never fails or repeats a deletion.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone

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
