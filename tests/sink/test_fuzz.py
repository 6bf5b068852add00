"""10,400 hostile requests against the real sink process (waitress, over TCP): no 5xx, nothing booked.

The fault matrix's fuzzer got 444 answers of 500 out of 12,000: RecursionError from deep
nesting, lone surrogates reaching Redis or the URL of a Reference-mode GET, a KeyError on a
GET that answered a List, the server's chunked-body error escaping. This fuzzer is a seeded
mutator of its own (each case is built from `random.Random(f"{SEED}-{index}")`, so a failing
case is reproduced by its index): ApiServerSource events in binary and structured mode, in
Resource and Reference mode, each broken in at least one way an API server would never
produce (names, namespaces, UIDs, JSON, nesting, surrogates as escapes and as raw bytes,
content types, CloudEvents attributes), plus byte-level mutations of events that cannot
schedule anything, Reference-mode events naming odd objects (the sink reads them from the
emulator: gone, running, nested too deep to decode, a condition whose type is an object), raw-socket
abuse (broken chunked encoding, huge or malformed headers, lying Content-Lengths), and well-formed
events of finished jobs one of whose fields a kind's declaration reads holds the wrong type (a
condition's type or status that is an object, conditions that are a map, a time that is a number,
managedBy a list, ownerReferences a map, runPolicy a list: issue 26 §9, where 42 of 10,000 such
events got a 500).

Asserted: no answer is 5xx (nothing is down, so not even 503); every case that is invalid
by construction is a 4xx; nothing is booked but the valid events mixed in as a control
(which must be); the sink is alive and logged no unexpected error.

`make test` sends the first 2,000 cases, in which every class of case (each family and each
way it breaks, 42 in all) comes at least twice; `make e2e` sends the other 8,400 (the `slow`
marker), each run with the same assertions. The two ranges never overlap, so both can run
against one sink and one Redis (a control's name and UID come from its index).
"""

from __future__ import annotations

import copy
import http.client
import json
import random
import socket
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import requests

from jobttl_emulator import TFJOB as TFJOB_RESOURCE, seed_object
from jobttl.core.store.keys import PENDING_INDEX
from jobttl.core.domain.kinds.registry import TFJOB
from tests.fixtures import finished_status, job_object, running_status, tfjob, with_server_fields
from tests.services import RedisServer, start_emulator, start_sink

SEED = 20261201
CASES = 10_400
QUICK = 2_000  # the first cases, sent by `make test`: every class at least twice (asserted)
RAW_EVERY = 40  # one case in this many is raw-socket abuse
CONTROL_EVERY = 500  # one case in this many is a valid event that must be booked
CONNECTIONS = 8
DEEP = 1500
NAMESPACE = "fuzz"

# Names, namespaces and UIDs no API server produces. "\ud800" and "\xff" are placeholders:
# they become a JSON escape of a lone surrogate, or raw bytes that are not UTF-8.
BAD_NAMES = [
    "",
    ".",
    "..",
    "A",
    "a_b",
    "-a",
    "a-",
    "a" * 254,
    "a/b",
    "a%2fb",
    " a",
    "a\n",
    "a\x00",
    "é",
    "a..b",
    ".a",
    "a.",
    "a b",
    "*",
    "a?b=c",
    "%2e%2e",
    "\\",
    5,
    None,
    [],
    {},
    True,
    1.5,
]
BAD_NAMESPACES = BAD_NAMES + ["a.b", "a" * 64, "kube_system"]
BAD_UIDS = [
    "",
    "x",
    "1234",
    str(uuid.uuid4())[:-1],
    str(uuid.uuid4()) + "0",
    uuid.uuid4().hex,
    "{" + str(uuid.uuid4()) + "}",
    str(uuid.uuid4()).replace("a", "g").replace("b", "g").replace("1", "g"),
    str(uuid.uuid4()) + "\n",
    5,
    None,
    [],
]
# One attribute of a structured event's envelope broken ("missing": left out), the rest valid.
ENVELOPE_BREAKS = [
    (a, v) for a in ("specversion", "id", "source", "type") for v in ("missing", None, "", 5, True, [], {})
] + [
    ("specversion", "0.3"),
    ("specversion", "1"),
    ("datacontenttype", "text/plain"),
    ("datacontenttype", "application/xml"),
    ("time", "yesterday"),
    ("time", 12),
]
SURROGATES = {"escape": b"\\ud800", "escape-low": b"\\udfff", "raw": b"\xed\xa0\x80", "not-utf8": b"\xff\xfe"}
PLACEHOLDER = "\x01fuzz\x01"


@dataclass
class Case:
    index: int
    family: str
    invalid: bool  # an API server would never send it: must be a 4xx
    headers: dict | None = None
    body: bytes = b""
    raw: bytes | None = None  # sent as is over a socket of its own
    control_uid: str | None = None


# --- the objects events are made of -----------------------------------------------------------------


def finished_tfjob(rng: random.Random) -> dict:
    """A job that a correct event would book: finished, with a TTL."""
    obj = with_server_fields(
        tfjob(f"job-{rng.randrange(10**6)}", NAMESPACE, ttl=3600), uid=str(uuid.UUID(int=rng.getrandbits(128)))
    )
    obj["status"] = finished_status(time.time())
    return obj


def running_tfjob(rng: random.Random) -> dict:
    """A job no mutation of a few bytes can make expire: it has no finish condition at all."""
    obj = with_server_fields(
        tfjob(f"run-{rng.randrange(10**6)}", NAMESPACE, ttl=0), uid=str(uuid.UUID(int=rng.getrandbits(128)))
    )
    obj["status"] = running_status(time.time())
    return obj


def encode(value, rng: random.Random) -> bytes:
    """JSON, with the placeholder (if any) replaced by a lone surrogate or bytes that are not UTF-8."""
    text = json.dumps(value).encode()
    if PLACEHOLDER.encode() in text or b"\\u0001fuzz\\u0001" in text:
        bad = SURROGATES[rng.choice(sorted(SURROGATES))]
        text = text.replace(b"\\u0001fuzz\\u0001", bad)
    return text


def nested(depth: int, rng: random.Random):
    value: object = "bottom"
    for _ in range(depth):
        value = [value] if rng.random() < 0.5 else {"x": value}
    return value


def deep_json(depth: int) -> bytes:
    """`depth` nested arrays, built as text (json.dumps itself would recurse too deep)."""
    return b"[" * depth + b"1" + b"]" * depth


def binary_headers(event_type="dev.knative.apiserver.resource.update", **overrides) -> dict:
    headers = {
        "ce-specversion": "1.0",
        "ce-id": str(uuid.uuid4()),
        "ce-source": "https://10.96.0.1:443",
        "ce-type": event_type,
        "content-type": "application/json",
    }
    headers.update(overrides)
    return {k: v for k, v in headers.items() if v is not None}


# --- breaking an event ----------------------------------------------------------------------------


def break_identity(obj: dict, rng: random.Random) -> None:
    meta = obj["metadata"]
    field, values = rng.choice(
        [
            ("name", BAD_NAMES),
            ("namespace", BAD_NAMESPACES),
            ("uid", BAD_UIDS),
            ("name", ["surrogate"]),
            ("namespace", ["surrogate"]),
            ("uid", ["surrogate"]),
        ]
    )
    value = rng.choice(values)
    if value == "surrogate":
        value = f"job{PLACEHOLDER}x"
    if rng.random() < 0.1:
        meta.pop(field)
    else:
        meta[field] = copy.deepcopy(value)


def break_shape(obj: dict, rng: random.Random) -> dict | list | str | int | None:
    """The data is not the object it must be."""
    choice = rng.randrange(9)
    if choice == 0:
        return [obj]
    if choice == 1:
        return rng.choice(["", "x", 0, None, True, []])
    if choice == 2:
        obj["metadata"] = rng.choice([None, [], "meta", 5])
    elif choice == 3:
        obj.pop(rng.choice(["apiVersion", "kind", "metadata"]))
    elif choice == 4:
        obj[rng.choice(["apiVersion", "kind"])] = rng.choice([5, None, [], {}, ""])
    elif choice == 5:
        obj["metadata"]["labels"] = rng.choice([{"a": 5}, {"a": None}, {"a": ["x"]}, "labels", [1]])
    elif choice == 6:
        obj["metadata"]["annotations"] = {"a": {"nested": True}}
    elif choice == 7:
        obj["metadata"]["annotations"] = {"note": f"x{PLACEHOLDER}"}
    else:
        obj["spec"]["deep"] = "\x02deep\x02"  # replaced with DEEP-level nesting as text
    return obj


def bytes_of(data, rng: random.Random) -> bytes:
    body = encode(data, rng)
    if b"\\u0002deep\\u0002" in body:
        body = body.replace(b'"\\u0002deep\\u0002"', deep_json(rng.choice([1025, DEEP, 5000, 20000])))
    return body


def broken_json(body: bytes, rng: random.Random) -> bytes:
    """Truncated, or with a byte JSON allows nowhere (a raw control character, bytes that are not UTF-8)."""
    cut = rng.randrange(1, len(body) - 1)
    return body[:cut] if rng.random() < 0.6 else body[:cut] + rng.choice([b"\x00", b"\x1f", b"\xc3\x28"]) + body[cut:]


def binary_case(index: int, rng: random.Random) -> Case:
    obj = finished_tfjob(rng)
    how = rng.randrange(10)
    headers = binary_headers()
    if how <= 3:
        break_identity(obj, rng)
        body = bytes_of(obj, rng)
    elif how <= 5:
        body = bytes_of(break_shape(obj, rng), rng)
    elif how == 6:
        body = broken_json(json.dumps(obj).encode(), rng)
    elif how == 7:
        body = rng.choice([b"", b"null", b"[]", deep_json(rng.choice([1100, DEEP, 100000])), bytes(rng.randbytes(64))])
    elif how == 8:  # the attributes are broken
        body = json.dumps(obj).encode()
        emptied, dropped = (
            rng.choice(["ce-id", "ce-source", "ce-type", "ce-specversion"]),
            rng.choice(["ce-id", "ce-source", "ce-type", "ce-specversion"]),
        )
        headers = rng.choice(
            [
                {**headers, emptied: ""},
                {k: v for k, v in headers.items() if k != dropped},
                {**headers, "ce-specversion": rng.choice(["0.3", "2.0", "1", "x" * 300])},
                {
                    **headers,
                    "content-type": rng.choice(
                        [
                            "text/plain",
                            "application/xml",
                            "multipart/form-data; boundary=x",
                            "application/octet-stream",
                            "image/png",
                        ]
                    ),
                },
                {k: v for k, v in headers.items() if k != "ce-specversion"} | {"content-type": "text/html"},
            ]
        )
    else:  # a Resource-mode delete whose identity is broken
        break_identity(obj, rng)
        headers["ce-type"] = "dev.knative.apiserver.resource.delete"
        body = bytes_of(obj, rng)
    return Case(index, f"binary-{how}", True, headers, body)


def structured_case(index: int, rng: random.Random) -> Case:
    obj = finished_tfjob(rng)
    envelope = {
        "specversion": "1.0",
        "id": str(uuid.uuid4()),
        "source": "https://10.96.0.1:443",
        "type": "dev.knative.apiserver.resource.add",
        "datacontenttype": "application/json",
        "data": obj,
    }
    how = rng.randrange(8)
    if how <= 2:
        break_identity(obj, rng)
    elif how == 3:
        envelope["data"] = break_shape(obj, rng)
    elif how == 4:
        key, value = rng.choice(
            [
                ("specversion", "0.3"),
                ("specversion", None),
                ("id", ""),
                ("source", None),
                ("type", 5),
                ("time", "yesterday"),
                ("time", 12),
                ("data_base64", "!!notbase64!!"),
                ("time", f"2026-01-01T00:00:00{PLACEHOLDER}"),
            ]
        )
        envelope.pop("data") if key == "data_base64" else None
        envelope[key] = value
        break_identity(obj, rng)  # even if the envelope were read, the object is broken
    elif how == 5:
        envelope = rng.choice([[envelope], "event", 5, None])
    elif how == 7:  # only the envelope is wrong: let through, the object would be booked
        key, value = rng.choice(ENVELOPE_BREAKS)
        if value == "missing":
            del envelope[key]
        else:
            envelope[key] = value
    body = bytes_of(envelope, rng) if how != 6 else broken_json(json.dumps(envelope).encode(), rng)
    content_type = rng.choice(["application/cloudevents+json", "application/cloudevents+json; charset=utf-8"])
    return Case(index, f"structured-{how}", True, {"content-type": content_type}, body)


def reference_case(index: int, rng: random.Random) -> Case:
    """Reference mode: the sink GETs the object it names from the API server (the emulator)."""
    action = rng.choice(["add", "update", "delete"])
    ref = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "namespace": NAMESPACE, "name": "x"}
    how = rng.randrange(4)
    invalid = how <= 1
    if how == 0:
        ref["name"] = rng.choice(BAD_NAMES + [f"a{PLACEHOLDER}"])
    elif how == 1:
        ref["namespace"] = rng.choice(BAD_NAMESPACES + [f"a{PLACEHOLDER}"])
    else:  # well-formed names of odd objects: gone, running, too deep to decode, another namespace
        ref["name"] = rng.choice(
            ["nothing-here", "running", "deep", "a" * 253, "a.b.c", "0", "no-ttl", "odd-conditions"]
        )
        ref["namespace"] = rng.choice([NAMESPACE, "elsewhere", "kube-system", "a" * 63])
        if rng.random() < 0.2:
            ref.update(rng.choice([{"apiVersion": "kubeflow.org/v2"}, {"kind": "Pod", "apiVersion": "v1"}]))
    body = bytes_of(ref, rng)
    return Case(index, f"reference-{how}", invalid, binary_headers(f"dev.knative.apiserver.ref.{action}"), body)


def noise_case(index: int, rng: random.Random) -> Case:
    """Byte-level mutations of events that cannot book anything, valid or not (a running job)."""
    body = bytearray(json.dumps(running_tfjob(rng)).encode())
    for _ in range(rng.randrange(1, 6)):
        position = rng.randrange(len(body))
        op = rng.randrange(3)
        if op == 0:
            body[position] = rng.randrange(256)
        elif op == 1:
            del body[position]
        else:
            body[position:position] = rng.randbytes(rng.randrange(1, 8))
    headers = binary_headers(
        rng.choice(
            [
                "dev.knative.apiserver.resource.update",
                "dev.knative.apiserver.ref.add",
                "dev.knative.sources.ping",
                "com.example.other",
            ]
        )
    )
    return Case(index, "noise", False, headers, bytes(body))


def raw_case(index: int, rng: random.Random, port: int) -> Case:
    """HTTP itself broken: chunked encoding, headers, lengths."""
    body = json.dumps(running_tfjob(rng)).encode()
    start = (
        b"POST / HTTP/1.1\r\nHost: sink\r\nce-specversion: 1.0\r\nce-id: 1\r\nce-source: s\r\n"
        b"ce-type: dev.knative.apiserver.resource.update\r\nContent-Type: application/json\r\n"
    )
    how = rng.randrange(8)
    if how == 0:  # a chunk size that is not hex
        raw = start + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n" + body + b"\r\n0\r\n\r\n"
    elif how == 1:  # a chunk longer than it says
        raw = start + b"Transfer-Encoding: chunked\r\n\r\n5\r\n" + body + b"\r\n0\r\n\r\n"
    elif how == 2:  # a huge chunk size, and then the connection ends
        raw = start + b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n" + body[:100]
    elif how == 3:  # headers larger than any server should read
        raw = start + b"X-Big: " + b"a" * rng.choice([300_000, 1_000_000]) + b"\r\nContent-Length: 2\r\n\r\n{}"
    elif how == 4:  # thousands of headers
        raw = (
            start
            + b"".join(b"X-%d: v\r\n" % i for i in range(rng.choice([2000, 20000])))
            + b"Content-Length: 2\r\n\r\n{}"
        )
    elif how == 5:  # a lying or absurd Content-Length
        length = rng.choice([b"-1", b"abc", b"99999999999999999999", b"10, 20", b"1e3"])
        raw = start + b"Content-Length: " + length + b"\r\n\r\n" + body
    elif how == 6:  # header values that are not text, and a smuggling attempt
        raw = start.replace(b"ce-source: s", b"ce-source: \xff\xfe\xed\xa0\x80") + (
            b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" % len(body)
        )
    else:  # a broken request line or line endings
        raw = rng.choice(
            [
                b"POST / HTTP/9.9\r\nHost: x\r\n\r\n",
                b"POST /\x00 HTTP/1.1\r\n\r\n",
                b"\r\n\r\n\r\n",
                start.replace(b"\r\n", b"\n") + b"Content-Length: 2\n\n{}",
                b"GET " + b"/a" * 50000 + b" HTTP/1.1\r\n\r\n",
            ]
        )
    # Thousands of small headers, or both lengths at once: not wrong in themselves, but never a 5xx.
    return Case(index, f"raw-{how}", how not in (4, 6), raw=raw)


# Values of the wrong JSON type for a field a kind's declaration reads (issue 26 §9: a condition's
# type that was an object got a 500, "unhashable type: 'dict'", from reconcile).
WRONG_TYPES = [{"x": 1}, ["True"], 5, 1.5, True, {}, []]


def fields_case(index: int, rng: random.Random) -> Case:
    """A finished TFJob, valid in every way the sink checks before deciding, but one field its
    declaration reads (or decide() reads of every object) holds the wrong type: a 422 naming it."""
    obj = finished_tfjob(rng)
    status, run_policy, condition = obj["status"], obj["spec"]["runPolicy"], obj["status"]["conditions"][-1]
    how = rng.randrange(10)
    wrong = copy.deepcopy(rng.choice(WRONG_TYPES))
    if how == 0:  # the finishing condition's type
        condition["type"] = wrong
    elif how == 1:  # a condition's status (this one or an earlier one)
        rng.choice(status["conditions"])["status"] = wrong
    elif how == 2:  # conditions that are not a list
        status["conditions"] = rng.choice([{"Succeeded": "True"}, "Succeeded", 5, {"type": "Succeeded"}])
    elif how == 3:  # a condition that is not an object
        status["conditions"].insert(rng.randrange(len(status["conditions"]) + 1), rng.choice(["Succeeded", 5, ["x"]]))
    elif how == 4:  # the finish time
        status["completionTime"] = rng.choice([{"t": 1}, 1700000000, ["2026-01-01T00:00:00Z"], True])
    elif how == 5:  # the condition's time, read when completionTime is not there
        del status["completionTime"]
        condition["lastTransitionTime"] = rng.choice([{"t": 1}, 1700000000, ["2026-01-01T00:00:00Z"]])
    elif how == 6:  # managedBy
        run_policy["managedBy"] = rng.choice([["kubeflow.org/training-operator"], {"name": "x"}, 5, True])
    elif how == 7:  # ownerReferences
        obj["metadata"]["ownerReferences"] = rng.choice(
            [{"controller": True}, ["CronJob/x"], [{"kind": "CronJob", "name": "x", "controller": "true"}]]
        )
    elif how == 8:  # a path through something that is not an object
        obj["spec"]["runPolicy"] = rng.choice([[run_policy], "OnFailure", 5])
    else:  # status itself
        obj["status"] = rng.choice([[status], "Succeeded", 5])
    headers = binary_headers(
        rng.choice(["dev.knative.apiserver.resource.add", "dev.knative.apiserver.resource.update"])
    )
    return Case(index, f"fields-{how}", True, headers, json.dumps(obj).encode())


def control_case(index: int, rng: random.Random) -> Case:
    obj = finished_tfjob(rng)
    obj["metadata"]["name"] = f"control-{index}"
    return Case(index, "control", False, binary_headers(), json.dumps(obj).encode(), control_uid=obj["metadata"]["uid"])


FAMILIES = [binary_case, binary_case, structured_case, reference_case, noise_case, fields_case]
# Every class of case: a family and the way it breaks (the `how` each family draws).
CLASSES = (
    {f"binary-{how}" for how in range(10)}
    | {f"structured-{how}" for how in range(8)}
    | {f"reference-{how}" for how in range(4)}
    | {f"raw-{how}" for how in range(8)}
    | {f"fields-{how}" for how in range(10)}
    | {"noise", "control"}
)


def case(index: int, port: int) -> Case:
    rng = random.Random(f"{SEED}-{index}")
    if index % CONTROL_EVERY == CONTROL_EVERY - 1:
        return control_case(index, rng)
    if index % RAW_EVERY == 0:
        return raw_case(index, rng, port)
    return FAMILIES[index % len(FAMILIES)](index, rng)


# --- sending ----------------------------------------------------------------------------------------


class Client(threading.local):
    """One keep-alive connection per sending thread."""

    def __init__(self, port: int):
        self.port = port
        self.connection = None

    def post(self, headers: dict, body: bytes) -> tuple[int, str]:
        for attempt in range(2):
            if self.connection is None:
                self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                self.connection.request("POST", "/", body=body, headers=headers)
                response = self.connection.getresponse()
                response.read()
                if response.getheader("connection", "").lower() == "close":
                    self.connection.close()
                    self.connection = None
                return response.status, response.getheader("x-jobttl-outcome", "")
            except (http.client.HTTPException, OSError):
                self.connection.close()
                self.connection = None
                if attempt:
                    raise
        raise AssertionError("unreachable")


def send_raw(port: int, raw: bytes) -> int | None:
    """The status line's code, or None if the server closed the connection without one."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        try:
            sock.sendall(raw)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may refuse to read all of it, and say so
        reply = b""
        try:
            while chunk := sock.recv(65536):
                reply += chunk
        except OSError:
            pass
    if not reply.startswith(b"HTTP/"):
        return None
    return int(reply.split(b" ", 2)[1])


# --- the run ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)  # the emulator (this process, stdlib json) serves a 1,500-level object
    redis_server = RedisServer().start()
    emulator = start_emulator(tmp_path_factory.mktemp("fuzz"), [TFJOB_RESOURCE])
    seed_object(emulator.store, job_object(TFJOB, "running", NAMESPACE, state="running", at=time.time()))
    seed_object(emulator.store, job_object(TFJOB, "no-ttl", NAMESPACE, at=time.time() - 3600))
    deep = job_object(TFJOB, "deep", NAMESPACE, state="running", at=time.time())
    deep["spec"]["deep"] = nested(DEEP, random.Random(SEED))
    seed_object(emulator.store, deep)
    odd = job_object(TFJOB, "odd-conditions", NAMESPACE, at=time.time() - 3600)
    odd["status"]["conditions"][-1]["type"] = {"Succeeded": True}  # a 422 when read, never a 500
    seed_object(emulator.store, odd)
    sink, url = start_sink(
        {"JOBTTL_REDIS_URL": redis_server.url, "KUBECONFIG": str(emulator.kubeconfig), "JOBTTL_QUEUE": "fuzz"},
        tmp_path_factory.mktemp("fuzz-logs"),
    )
    try:
        yield sink, url, redis_server
    finally:
        sink.stop()
        emulator.stop()
        redis_server.stop()
        sys.setrecursionlimit(limit)


def send_and_check(stack, indices: range) -> Counter:
    """Sends the cases of `indices` and asserts all the module docstring says; their classes, counted."""
    sink, url, redis_server = stack
    port = int(url.rsplit(":", 1)[1])
    redis = redis_server.client()
    before = redis.zrange(PENDING_INDEX, 0, -1)
    client = Client(port)
    answers: dict[int, tuple[Case, int | None, str]] = {}

    def run(index: int) -> None:
        c = case(index, port)
        if c.raw is not None:
            answers[index] = (c, send_raw(port, c.raw), "")
        else:
            answers[index] = (c, *client.post(c.headers, c.body))

    started = time.monotonic()
    with ThreadPoolExecutor(CONNECTIONS) as pool:
        list(pool.map(run, indices))
    took = time.monotonic() - started

    statuses = Counter(status for _, status, _ in answers.values())
    by_family = Counter((c.family, status) for c, status, _ in answers.values())
    print(
        f"fuzz: {len(indices)} cases ({indices.start}-{indices.stop - 1}) in {took:.1f}s; "
        f"statuses {dict(sorted(statuses.items(), key=str))}"
    )
    server_errors = sorted((i, c.family, s) for i, (c, s, _) in answers.items() if s is not None and s >= 500)
    assert server_errors == [], f"5xx answers (index, family, status): {server_errors[:20]}"
    not_refused = sorted(
        (i, c.family, s, o) for i, (c, s, o) in answers.items() if c.invalid and c.raw is None and not 400 <= s < 500
    )
    assert not_refused == [], f"invalid input not refused with a 4xx: {not_refused[:20]}"
    raw_accepted = sorted(
        (i, c.family, s)
        for i, (c, s, _) in answers.items()
        if c.raw is not None and c.invalid and s is not None and s < 400
    )
    assert raw_accepted == [], f"broken HTTP answered as if it were fine: {raw_accepted[:20]}"
    controls = {c.control_uid for c, _, _ in answers.values() if c.control_uid}
    assert len(controls) == sum(1 for i in indices if i % CONTROL_EVERY == CONTROL_EVERY - 1)
    assert all(o == "scheduled" for c, _, o in answers.values() if c.control_uid), "the valid controls are booked"
    booked = set(redis.zrange(PENDING_INDEX, 0, -1)) - set(before)
    assert {m.decode() for m in booked} == controls, "nothing but the controls is booked"
    assert sink.process.poll() is None
    assert requests.get(f"{url}/healthz", timeout=5).status_code == 200
    assert "unexpected-error" not in sink.log() and "Traceback" not in sink.log()
    print("fuzz families:", dict(sorted(by_family.items(), key=str)))
    return Counter(c.family for c, _, _ in answers.values())


def test_hostile_requests_of_every_class_get_no_5xx_and_book_nothing(stack):
    classes = send_and_check(stack, range(QUICK))
    assert set(classes) == CLASSES and min(classes.values()) >= 2, classes


@pytest.mark.slow
def test_the_rest_of_the_ten_thousand_hostile_requests_get_no_5xx_and_book_nothing(stack):
    send_and_check(stack, range(QUICK, CASES))
