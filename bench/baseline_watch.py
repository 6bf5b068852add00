"""Row 10's baseline: a bare watch with the official client that keeps nothing.

    python -m bench.baseline_watch

What any watcher must do at least: the paged LIST of every TFJob (500 a page, each page
dropped once counted), then `kubernetes.watch.Watch().stream` from the list's resourceVersion
with bookmarks, relisting on 410 (retrying other refusals after 0.5 s). It keeps no object, no UID, nothing but the resourceVersion.
Prints one JSON line per completed LIST: {"listed": N, "resourceVersion": RV}.
"""

from __future__ import annotations

import json
import os
import time

import urllib3

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

PAGE = 500
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"


def list_all(api: client.CustomObjectsApi) -> tuple[int, str]:
    while True:
        seen, token, rv = 0, None, ""
        try:
            while True:
                page = api.list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=PAGE, _continue=token)
                rv = rv or page["metadata"]["resourceVersion"]
                seen += len(page["items"])
                token = page["metadata"].get("continue")
                if not token:
                    return seen, rv
        except ApiException as exc:
            if exc.status != 410:
                raise


def main() -> None:
    api = client.CustomObjectsApi(config.new_client_from_config(config_file=os.environ["KUBECONFIG"]))
    rv = None
    while True:
        if rv is None:
            seen, rv = list_all(api)
            print(json.dumps({"listed": seen, "resourceVersion": rv}), flush=True)
        try:
            for event in watch.Watch().stream(
                api.list_cluster_custom_object,
                GROUP,
                VERSION,
                PLURAL,
                resource_version=rv,
                allow_watch_bookmarks=True,
                timeout_seconds=300,
            ):
                rv = event["object"]["metadata"]["resourceVersion"]
        except ApiException as exc:
            if exc.status == 410:
                rv = None  # too old to resume: list again
            else:
                time.sleep(0.5)  # the API server refused the watch for now: retry from the same resourceVersion
        except urllib3.exceptions.HTTPError:
            time.sleep(0.5)


if __name__ == "__main__":
    main()
