"""The emulator's own GET+DELETE ceiling: a tight loop, no queue, no Redis.

    python -m bench.ceiling --refs FILE --mode client|raw

``client``: the official kubernetes client, one GET and one guarded Background DELETE per
object, exactly the baseline task's requests; ``raw``: the same two requests over one
keep-alive http.client connection, without the client's machinery: the most this emulator
serves one caller.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
from urllib.parse import urlparse

import yaml

from bench import baseline_tasks


def raw_loop(refs: list[list[str]]) -> None:
    config = yaml.safe_load(open(os.environ["KUBECONFIG"]))
    server = urlparse(config["clusters"][0]["cluster"]["server"])
    headers = {
        "Authorization": f"Bearer {config['users'][0]['user']['token']}",
        "Accept": "application/json",
        "Content-Type": "application/json",
    }
    connection = http.client.HTTPConnection(server.hostname, server.port)
    for namespace, name, uid in refs:
        path = f"/apis/kubeflow.org/v1/namespaces/{namespace}/tfjobs/{name}"
        connection.request("GET", path, headers=headers)
        obj = json.loads(connection.getresponse().read())
        body = json.dumps(
            {
                "propagationPolicy": "Background",
                "preconditions": {"uid": uid, "resourceVersion": obj["metadata"]["resourceVersion"]},
            }
        )
        connection.request("DELETE", path, body=body, headers=headers)
        connection.getresponse().read()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--refs", required=True)
    parser.add_argument("--mode", choices=("client", "raw"), required=True)
    args = parser.parse_args()
    refs = json.load(open(args.refs))
    if args.mode == "raw":
        raw_loop(refs)
    else:
        for namespace, name, uid in refs:
            baseline_tasks.delete_job(namespace, name, uid)


if __name__ == "__main__":
    main()
