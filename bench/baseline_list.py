"""Row 6's baseline: the bare paged LIST of every TFJob, with the official client, 500 a page.

    python -m bench.baseline_list client|raw

``client`` is what any resync must do at least (the official client's
`list_cluster_custom_object`, pages decoded to dicts); ``raw`` fetches the same pages over
one keep-alive connection and decodes only the continue token's page: the emulator's own
ceiling. Prints the number of objects seen.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import sys
from urllib.parse import quote, urlparse

import yaml
from kubernetes import client, config

PAGE = 500
_CONTINUE = re.compile(rb'"continue":"([^"]*)"')


def with_client() -> int:
    api = client.CustomObjectsApi(config.new_client_from_config(config_file=os.environ["KUBECONFIG"]))
    seen, token = 0, None
    while True:
        page = api.list_cluster_custom_object("kubeflow.org", "v1", "tfjobs", limit=PAGE, _continue=token)
        seen += len(page["items"])
        token = page["metadata"].get("continue")
        if not token:
            return seen


def raw() -> int:
    kubeconfig = yaml.safe_load(open(os.environ["KUBECONFIG"]))
    server = urlparse(kubeconfig["clusters"][0]["cluster"]["server"])
    headers = {"Authorization": f"Bearer {kubeconfig['users'][0]['user']['token']}", "Accept": "application/json"}
    connection = http.client.HTTPConnection(server.hostname, server.port)
    pages, token = 0, None
    while True:
        path = f"/apis/kubeflow.org/v1/tfjobs?limit={PAGE}" + (f"&continue={quote(token)}" if token else "")
        connection.request("GET", path, headers=headers)
        body = connection.getresponse().read()
        pages += 1
        found = _CONTINUE.search(body[-2000:]) or _CONTINUE.search(body[:2000])
        token = found.group(1).decode() if found else None
        if not token:
            return pages


if __name__ == "__main__":
    print(
        json.dumps(
            {"seen" if sys.argv[1] == "client" else "pages": with_client() if sys.argv[1] == "client" else raw()}
        )
    )
