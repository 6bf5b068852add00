"""Notifications, the pure parts (jobttl.core.domain.notices.notify, .digest): the policy's `notify`, which channels
hear of which audit entry, what a digest says, when it goes, and what an error may say of a URL."""

from __future__ import annotations

import pytest

from jobttl.core.domain.notices import digest
from jobttl.core.domain.decisions.decision import decide
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.domain.notices.notify import (
    ALL_GROUP,
    ATTEMPTS,
    EVENTS,
    UNKNOWN_CHANNEL,
    Channel,
    Delivery,
    first_due,
    gives_up,
    notification_of,
    owner_requests,
    redacted,
    resolve,
    retry_delay,
    route,
    send_at,
)
from jobttl.core.domain.rules.policy import PolicyError, parse_policy
from tests.fixtures import finished_status, tfjob, with_server_fields

HOOK = "json://hooks.example:8080/jobttl"


def channels(*specs: dict) -> tuple[Channel, ...]:
    return parse_policy({"notify": list(specs)}, "policy.yaml").notify


# --- the policy's notify ------------------------------------------------------------------------------------


def test_a_channel_reads_with_its_defaults():
    [channel] = channels({"name": "ops", "url": HOOK, "on": ["deleted", "stuck"]})
    assert channel == Channel(
        "ops", frozenset({"deleted", "stuck"}), HOOK, None, (), 300, False, "policy.yaml: notify[0].url"
    )
    [secret] = channels(
        {
            "name": "chat",
            "urlFromEnv": "CHAT_URL",
            "on": ["deleted"],
            "namespaces": ["a"],
            "digest": "1h",
            "owners": True,
        }
    )
    assert (secret.url, secret.url_from_env, secret.namespaces, secret.digest, secret.owners) == (
        None,
        "CHAT_URL",
        ("a",),
        3600,
        True,
    )
    assert parse_policy({}, "p").notify == ()


@pytest.mark.parametrize(
    "notify, field, problem",
    [
        ({"name": "ops", "url": HOOK}, "notify[0].on", "a channel needs events to receive"),
        ({"name": "ops", "url": HOOK, "on": ["delted"]}, "notify[0].on[0]", "unknown event 'delted'; expected one of"),
        ({"name": "ops", "url": HOOK, "on": "deleted"}, "notify[0].on", "expected a list of non-empty strings"),
        ({"name": "ops", "url": HOOK, "on": ["deleted"], "digest": "1x"}, "notify[0].digest", "expected a duration"),
        ({"name": "ops", "url": HOOK, "on": ["deleted"], "digest": -5}, "notify[0].digest", "cannot be negative"),
        ({"name": "ops", "on": ["deleted"]}, "notify[0]", "set url (an Apprise URL holding no secret) or urlFromEnv"),
        ({"name": "ops", "url": HOOK, "urlFromEnv": "X", "on": ["deleted"]}, "notify[0]", "one of them"),
        ({"name": "ops", "url": "hooks.example/x", "on": ["deleted"]}, "notify[0].url", "expected an Apprise URL"),
        (
            {"name": "ops", "urlFromEnv": "NOT-A-NAME", "on": ["deleted"]},
            "notify[0].urlFromEnv",
            "expected the name of an environment variable",
        ),
        ({"url": HOOK, "on": ["deleted"]}, "notify[0].name", "required"),
        ({"name": "Ops", "url": HOOK, "on": ["deleted"]}, "notify[0].name", "lowercase letters"),
        (
            {"name": "ops", "url": HOOK, "on": ["deleted"], "owners": "yes"},
            "notify[0].owners",
            "expected true or false",
        ),
        ({"name": "ops", "url": HOOK, "on": ["deleted"], "namespaces": "a"}, "notify[0].namespaces", "expected a list"),
        ({"name": "ops", "url": HOOK, "on": ["deleted"], "to": "me"}, "notify[0].to", "unknown field"),
    ],
)
def test_a_bad_channel_stops_the_policy_naming_file_field_and_problem(notify, field, problem):
    with pytest.raises(PolicyError) as raised:
        parse_policy({"notify": [notify]}, "policy.yaml")
    assert str(raised.value).startswith(f"policy.yaml: {field}: ")
    assert problem in str(raised.value)


def test_on_reads_as_written_whatever_yaml_1_1_made_of_it():
    import yaml

    written = yaml.safe_load("notify: [{name: ops, url: 'json://h/x', on: [deleted]}]")  # the key is True here
    assert True in written["notify"][0]
    assert parse_policy(written, "p").notify[0].on == {"deleted"}
    helm = {"notify": [{"name": "ops", "url": "json://h/x", "true": ["stuck"]}]}  # as the chart renders it
    assert parse_policy(helm, "p").notify[0].on == {"stuck"}


def test_two_channels_by_one_name_and_a_notify_that_is_no_list_are_refused():
    with pytest.raises(PolicyError, match=r"policy.yaml: notify\[1\].name: duplicate channel name 'ops'"):
        channels({"name": "ops", "url": HOOK, "on": ["deleted"]}, {"name": "ops", "url": HOOK, "on": ["stuck"]})
    with pytest.raises(PolicyError, match=r"policy.yaml: notify: expected a list of channels"):
        parse_policy({"notify": {"name": "ops"}}, "policy.yaml")


def test_a_url_from_the_environment_must_be_set_when_the_notifier_starts():
    [channel] = channels({"name": "chat", "urlFromEnv": "CHAT_URL", "on": ["deleted"]})
    assert resolve(channel, {"CHAT_URL": " mmost://chat.example/token "}) == "mmost://chat.example/token"
    with pytest.raises(
        ValueError,
        match=r"^policy.yaml: notify\[0\].urlFromEnv: the environment variable CHAT_URL "
        r"is not set",
    ):
        resolve(channel, {"CHAT_URL": ""})


# --- an audit entry, as a notification ------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, event",
    [
        ({"event": "deleted"}, "deleted"),
        ({"event": "scheduled"}, "upcoming"),
        ({"event": "moved"}, "upcoming"),
        ({"event": "stuck"}, "stuck"),
        ({"event": "invalid-ttl"}, "invalid-ttl"),
        ({"event": "policy-error"}, "policy-error"),
        ({"event": "kind-not-served"}, "kind-not-served"),
        ({"event": "deletions-held", "reason": "first-run-review"}, "review-opened"),
        ({"event": "deletions-held"}, "guard-tripped"),
        ({"event": "held", "reason": "burst"}, "guard-tripped"),
        ({"event": "held", "reason": "first-run-review"}, None),  # joins the review already told
        ({"event": "delete-requested"}, None),  # `deleted` follows, once it is gone
        ({"event": "would-delete"}, None),
        ({"event": "cancelled"}, None),
        ({}, None),
    ],
)
def test_which_audit_entries_are_notifications(fields, event):
    assert notification_of(fields) == event


OPS = Channel("ops", frozenset({"stuck", "guard-tripped"}))
TEAM = Channel("team", frozenset({"deleted"}), namespaces=("team-a",))
OWNERS = Channel("owners", frozenset(), namespaces=("team-a", "team-b"), owners=True)
EVERYONE = (OPS, TEAM, OWNERS)
JOB = {"kind": "TFJob", "apiVersion": "kubeflow.org/v1", "name": "train", "uid": "u"}


@pytest.mark.parametrize(
    "fields, deliveries, refused",
    [
        # A channel hears of what it is `on`, in the namespaces it covers (cluster-wide entries: every channel's).
        ({"event": "stuck", "namespace": "team-a", **JOB}, [("ops", ALL_GROUP)], []),
        ({"event": "deleted", "namespace": "team-a", **JOB}, [("team", ALL_GROUP)], []),
        ({"event": "deleted", "namespace": "team-z", **JOB}, [], []),
        ({"event": "deletions-held", "count": "9"}, [("ops", ALL_GROUP)], []),
        ({"event": "scheduled", "namespace": "team-a", **JOB}, [], []),
        # A job's owner asks for its upcoming and deleted messages on a channel that takes them...
        ({"event": "scheduled", "namespace": "team-b", "notify": "owners", **JOB}, [("owners", ALL_GROUP)], []),
        (
            {"event": "deleted", "namespace": "team-a", "notify": "owners, team", **JOB},
            [("team", ALL_GROUP), ("owners", ALL_GROUP)],
            ["team"],
        ),
        # ... and nothing else: a channel without owners: true, one not covering the namespace, an unknown one,
        # a URL (never used as one), another event.
        ({"event": "deleted", "namespace": "team-z", "notify": "owners", **JOB}, [], ["owners"]),
        (
            {"event": "deleted", "namespace": "team-b", "notify": "json://169.254.169.254/latest", **JOB},
            [],
            [UNKNOWN_CHANNEL],
        ),
        ({"event": "deleted", "namespace": "team-b", "notify": "nobody", **JOB}, [], [UNKNOWN_CHANNEL]),
        ({"event": "stuck", "namespace": "team-b", "notify": "owners", **JOB}, [("ops", ALL_GROUP)], []),
        ({"event": "cancelled", "namespace": "team-a", "notify": "owners", **JOB}, [], []),
    ],
)
def test_who_hears_of_an_entry(fields, deliveries, refused):
    routed = route(fields, EVERYONE)
    assert [(d.channel, d.group) for d in routed.deliveries] == deliveries
    assert list(routed.refused) == refused
    assert "notify" not in routed.item  # the annotation's value is never kept, let alone sent


def test_an_owner_asks_for_a_few_channels_by_name():
    assert owner_requests(" a, b,,a , c ") == ("a", "b", "c")
    assert owner_requests("a, json://169.254.169.254/x, Bad Name") == ("a", UNKNOWN_CHANNEL)
    assert owner_requests("a,b,c,d,e,f,g") == ("a", "b", "c", "d", "e")
    assert owner_requests(None) == () and owner_requests("  ") == ()


def test_the_annotation_travels_with_the_decision_as_written_or_not_at_all():
    def notify_of(value):
        obj = with_server_fields(tfjob("train", "team", ttl=60))
        obj["metadata"]["annotations"] = {"jobttl.io/notify": value}
        obj["status"] = finished_status(1_700_000_000, "Succeeded")
        return decide(obj, TFJOB).notify

    assert notify_of(" owners ") == "owners"
    assert notify_of("team, json://hooks.example/s3cret-token") == "team,(unknown)"  # the URL is never kept
    assert notify_of("x" * 300) is None
    assert notify_of("") is None and notify_of(" , ") is None


# --- when a digest goes ---------------------------------------------------------------------------------


def test_a_quiet_group_gathers_briefly_and_a_busy_one_waits_out_its_period():
    assert first_due(1000, 3600) == 1030
    assert first_due(1000, 10) == 1010  # never longer than the period
    assert first_due(1000, 3600, gather=0) == 1000
    assert send_at(1030, None, 3600) == 1030
    assert send_at(1030, 900, 3600) == 4500  # sent at 900: not again before 4500
    assert send_at(9000, 900, 3600) == 9000


def test_a_failed_message_is_retried_with_backoff_then_given_up():
    assert [retry_delay(n) for n in range(1, 9)] == [10, 20, 40, 80, 160, 320, 640, 900]
    assert retry_delay(3, first=1) == 4
    assert not gives_up(ATTEMPTS - 1) and gives_up(ATTEMPTS)


# --- what a digest says ---------------------------------------------------------------------------------


def deleted(name: str, kind: str = "TFJob", namespace: str = "team-a") -> dict:
    return {
        "event": "deleted",
        "kind": kind,
        "namespace": namespace,
        "name": name,
        "ttl": "3600",
        "ttlSource": "policy",
    }


def test_a_deleted_digest_says_how_many_which_kinds_and_links_the_console():
    items = [deleted("a"), deleted("b", "PyTorchJob"), deleted("c")]
    message = digest.render("deleted/team-a", items, 3, "https://jobttl.example/")
    assert message.title == "jobttl: 3 jobs deleted in team-a"
    assert message.body.splitlines() == [
        "3 deleted in namespace team-a: 2 TFJob, 1 PyTorchJob",
        "- TFJob team-a/a, TTL 1h from policy",
        "- PyTorchJob team-a/b, TTL 1h from policy",
        "- TFJob team-a/c, TTL 1h from policy",
        "History: https://jobttl.example/history?namespace=team-a",
    ]
    assert message.events == ("deleted",) and not message.warning
    assert "History" not in digest.render("deleted/team-a", items, 3, None).body


def test_a_digest_lists_a_few_and_counts_the_rest():
    items = [deleted(f"j{i}") for i in range(25)]
    message = digest.render("deleted/team-a", items, 40, None)
    assert message.title == "jobttl: 40 jobs deleted in team-a"
    lines = message.body.splitlines()
    assert lines[0] == "40 deleted in namespace team-a: 25 TFJob (and 15 not kept by the digest)"
    assert len(lines) == 1 + digest.LINES + 1 and lines[-1] == "- ... and 5 more"


def test_the_other_events_go_together_a_section_each_in_a_fixed_order():
    items = [
        {
            "event": "stuck",
            "kind": "TFJob",
            "namespace": "a",
            "name": "s",
            "stuckFor": "700",
            "finalizers": '["example.com/block"]',
        },
        {"event": "review-opened", "count": "12", "seen": "40", "heldId": "abc123def456"},
        {
            "event": "upcoming",
            "kind": "TFJob",
            "namespace": "a",
            "name": "u",
            "due": "1796000000",
            "ttl": "60",
            "ttlSource": "annotation jobttl.io/ttl",
            "dryRun": "true",
        },
        {"event": "kind-not-served", "resource": "ray.io/v1/RayJob", "detail": "not served"},
    ]
    message = digest.render(ALL_GROUP, items, 4, "https://jobttl.example")
    assert message.title == "jobttl: 12 held (first-run review), 1 upcoming, 1 stuck, 1 kind-not-served"
    assert message.events == ("review-opened", "upcoming", "stuck", "kind-not-served") and message.warning
    assert message.body.split("\n\n") == [
        "first-run review: deletions held until an operator confirms them (1):\n"
        "- 12 held of 40 jobs seen, held id abc123def456\n"
        "Review them with `jobttl held`, then confirm with `jobttl resync --confirm abc123def456`, or at "
        "https://jobttl.example/held",
        "deletions scheduled (1):\n"
        "- TFJob a/u at 2026-11-30T00:53:20Z, TTL 1m from annotation jobttl.io/ttl (dry run: would delete)",
        "deletions stuck (deleted, still present) (1):\n- TFJob a/s: still present for 11m40s; finalizers "
        '["example.com/block"]',
        "kinds the cluster does not serve (1):\n- ray.io/v1/RayJob: not served",
    ]
    assert EVENTS.index("review-opened") < EVENTS.index("kind-not-served")


# --- what may be said of a channel ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, text, said",
    [
        (
            "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#general",
            "Failed to send to slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#general: 404",
            "Failed to send to ***: 404",
        ),
        (
            "mmost://chat.example:8065/s3cr3tt0ken",
            "POST https://chat.example:8065/hooks/s3cr3tt0ken failed",
            "POST https://chat.example:8065/hooks/*** failed",
        ),
        (
            "mailto://bob:hunter22@smtp.example:25?to=ops@example.org",
            "auth failed for bob with hunter22",
            "auth failed for bob with ***",
        ),
        ("json://hooks.example/x?token=abcdef", "got 500 from hooks.example/x?token=abcdef", "got 500 from ***"),
    ],
)
def test_a_channels_error_says_nothing_of_its_secrets(url, text, said):
    assert redacted(text, url) == said


def test_a_delivery_names_a_channel_and_a_group():
    assert Delivery("ops", ALL_GROUP) == Delivery("ops", "all")


@pytest.mark.parametrize(
    "item",
    [
        {"event": "deleted", "kind": "TFJob", "namespace": "a", "name": "j", "ttl": "inf"},
        {"event": "deleted", "kind": "TFJob", "namespace": "a", "name": "j", "ttl": "1e400"},
        {"event": "deleted", "kind": "TFJob", "namespace": "a", "name": "j", "ttl": "nan"},
        {"event": "upcoming", "kind": "TFJob", "namespace": "a", "name": "j", "due": "1e300"},
        {"event": "stuck", "kind": "TFJob", "namespace": "a", "name": "j", "stuckFor": "-inf"},
        {"event": "review-opened", "count": "inf"},
    ],
)
def test_a_digest_of_numbers_no_job_has_says_them_plainly(item):
    """Redis is not a trusted input: a buffered item anything with the password wrote is told as
    best it can be, never an exception that ends the channel's thread."""
    group = "deleted/a" if item["event"] == "deleted" else ALL_GROUP
    message = digest.render(group, [item], 1, None)
    assert "TFJob a/j" in message.body or "held" in message.body


def test_a_digest_leaves_out_what_is_not_an_item():
    message = digest.render(
        "deleted/a",
        ["junk", 42, None, ["x"], {"event": "deleted", "kind": "TFJob", "namespace": "a", "name": "kept"}],
        5,
        None,
    )
    assert "TFJob a/kept" in message.body and message.title == "jobttl: 5 jobs deleted in a"
    assert message.body.startswith("5 deleted in namespace a: 1 TFJob (and 4 not kept by the digest)")


SECRET = "S3CRETTOKEN"


@pytest.mark.parametrize(
    "url, problem",
    [
        (f"json://hooks.example/p?+Authorization=Bearer%20{SECRET}", "adds a header or a field"),
        (f"json://hooks.example/p?%2BAuthorization=Bearer%20{SECRET}", "adds a header or a field"),
        (f"form://hooks.example/p?-token={SECRET}", "adds a header or a field"),
        (f"jsons://hooks.example/p?:apikey={SECRET}", "adds a header or a field"),
        (f"json://hooks.example/p?x=1&token={SECRET}", "'token' is a credential's"),
        (f"mailto://smtp.example?to=ops@example.org&pass={SECRET}", "'pass' is a credential's"),
        (f"mailtos://bob:{SECRET}@smtp.example?to=ops@example.org", "user or password"),
        (f"json://{SECRET}@hooks.example/p", "user or password"),
        (f"slack://T000/B000/{SECRET}", "slack:// is not one"),
        (f"msteams://{SECRET}/b/c", "msteams:// is not one"),
        (f"mmost://chat.example/{SECRET}", "mmost:// is not one"),
    ],
)
def test_a_url_with_a_slot_for_a_credential_is_refused_at_load_naming_the_field_never_the_value(url, problem):
    """A `url` sits in the policy's ConfigMap: every process refuses one that may hold a secret."""
    with pytest.raises(PolicyError) as raised:
        parse_policy({"notify": [{"name": "ops", "url": url, "on": ["deleted"]}]}, "policy.yaml")
    assert str(raised.value).startswith("policy.yaml: notify[0].url: ") and problem in str(raised.value)
    assert "urlFromEnv" in str(raised.value) and SECRET not in str(raised.value)


@pytest.mark.parametrize(
    "url",
    [
        "json://hooks.example/jobttl",
        "jsons://hooks.example:8443/a/b?format=text",
        "xml://10.0.0.5/x",
        "forms://hooks.example/p",
        "mailto://smtp.example:25?from=jobttl@example.org&to=ops@example.org",
    ],
)
def test_a_url_without_a_credential_slot_is_taken(url):
    assert parse_policy({"notify": [{"name": "ops", "url": url, "on": ["deleted"]}]}, "p").notify[0].url == url


def test_deletions_in_many_namespaces_are_one_message_a_part_per_namespace():
    """At most one message per channel per period: a thousand namespaces are one digest, not a thousand."""
    items = [deleted(f"j{i}") for i in range(3)]
    items += [{**deleted(f"k{i}", "PyTorchJob"), "namespace": f"ns-{i:04d}"} for i in range(1000)]
    items.append({"event": "stuck", "kind": "TFJob", "namespace": "team-a", "name": "s", "stuckFor": "700"})
    message = digest.render(ALL_GROUP, items, len(items), "https://jobttl.example")
    assert message.title == "jobttl: 1003 jobs deleted in 1001 namespaces, 1 stuck"
    parts = message.body.split("\n\n")
    assert parts[0].splitlines() == [
        "3 deleted in namespace team-a: 3 TFJob",
        "- TFJob team-a/j0, TTL 1h from policy",
        "- TFJob team-a/j1, TTL 1h from policy",
        "- TFJob team-a/j2, TTL 1h from policy",
        "History: https://jobttl.example/history?namespace=team-a",
    ]
    assert parts[1].splitlines() == [
        "1 deleted in namespace ns-0000: 1 PyTorchJob",
        "- PyTorchJob ns-0000/k0, TTL 1h from policy",
        "History: https://jobttl.example/history?namespace=ns-0000",
    ]
    assert sum(p.startswith("1 deleted in namespace ns-") for p in parts) == digest.NAMESPACES - 1
    assert (
        f"... and {1000 - digest.NAMESPACES + 1} deleted in {1000 - digest.NAMESPACES + 1} more namespaces: "
        "https://jobttl.example/history" in parts
    )
    assert parts[-1].startswith("deletions stuck") and message.warning
