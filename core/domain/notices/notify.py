"""Notifications: which channels hear of what jobttl did, and when. Pure: entries in, deliveries out.

The policy's ``notify`` list names channels, each an Apprise URL (``url``, for endpoints that hold
no secret) or the environment variable holding one (``urlFromEnv``, filled from a Secret), the
events it receives (``on``), the namespaces it covers (``namespaces``, default all) and how often
it may be written to (``digest``)::

    notify:
      - name: ops
        urlFromEnv: JOBTTL_NOTIFY_OPS_URL
        on: [review-opened, guard-tripped, stuck, policy-error, kind-not-served]
        digest: 15m
      - name: team-a
        url: json://hooks.team-a.svc:8080/jobttl
        on: [deleted]
        namespaces: [team-a]
        owners: true     # a job may ask for its upcoming/deleted messages here (jobttl.io/notify: team-a)

What a channel is told comes from the audit trail, the one record of what happened
(`notification_of` reads an entry as one of `EVENTS`): the notifier (`jobttl notify`) reads the
trail and nothing in the deletion path waits for it. A channel gets at most one message per
digest period: everything it hears of joins its one digest group (`group_of`), and the message
says each event in a section of its own (``deleted``: a section per namespace). On a cluster of a
thousand namespaces that is still one message a period, not a thousand. The first message of a
quiet channel waits `GATHER` seconds (at most the period) so that what happens together is told
together.

A job's owner asks for the messages of their job with the annotation ``jobttl.io/notify``: the
names of channels the policy defines with ``owners: true`` and whose namespaces include the job's.
Never a URL: jobttl would send requests wherever an annotation said (SSRF into the cluster, a
cloud's metadata endpoint). A name that is not such a channel gets nothing, and is counted
(``refused``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus

ANNOTATION = "jobttl.io/notify"
EVENTS = (
    "review-opened",
    "deleted",
    "upcoming",
    "stuck",
    "guard-tripped",
    "invalid-ttl",
    "policy-error",
    "kind-not-served",
)
OWNER_EVENTS = frozenset({"upcoming", "deleted"})  # what `jobttl.io/notify` asks for
WARNINGS = frozenset({"review-opened", "stuck", "guard-tripped", "invalid-ttl", "policy-error", "kind-not-served"})
CHANNEL_KEYS = {"name", "url", "urlFromEnv", "on", "namespaces", "digest", "owners"}
ALL_GROUP = "all"
DEFAULT_DIGEST = 300  # seconds: at most one message per 5 minutes per group, as Alertmanager's group_interval
GATHER = 30  # seconds a quiet group waits for what comes with its first entry (Alertmanager's group_wait)
UNKNOWN_CHANNEL = "(unknown)"  # the metric's label for a name no channel has (never the annotation's text)
MAX_OWNER_CHANNELS = 5  # names one annotation may ask for
RETRY_FIRST = 10  # seconds before a failed message is tried again; doubles, up to RETRY_MAX
RETRY_MAX = 900
ATTEMPTS = 10  # tries of one message (about an hour of retries) before it is dropped, and counted
# Channel names go into metric labels and Redis keys: DNS-label-like, as a Kubernetes name.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+")


@dataclass(frozen=True)
class Channel:
    """One channel of the policy's `notify`. `url` or `url_from_env`, never both; `place` says where
    it was written (file and field), for the notifier's errors at start."""

    name: str
    on: frozenset[str]
    url: str | None = None
    url_from_env: str | None = None
    namespaces: tuple[str, ...] = ()
    digest: int = DEFAULT_DIGEST
    owners: bool = False
    place: str = "notify"

    def covers(self, namespace: str | None) -> bool:
        """Whether an entry of `namespace` is this channel's (None: cluster-wide, every channel's)."""
        return not self.namespaces or namespace is None or namespace in self.namespaces


@dataclass(frozen=True)
class Delivery:
    """One entry for one channel: the digest group it joins."""

    channel: str
    group: str


@dataclass(frozen=True)
class Routed:
    """What one audit entry becomes: its notification event (None: no channel cares about it),
    the deliveries, and the channel names a job's owner asked for that do not take its messages."""

    event: str | None
    deliveries: tuple[Delivery, ...] = ()
    refused: tuple[str, ...] = ()
    item: dict[str, Any] = field(default_factory=dict)


# --- the policy's `notify` (read by jobttl.core.domain.rules.policy, which names file and field) ------------------


def parse_channels(reader: Any, value: Any) -> tuple[Channel, ...]:
    """The `notify` list; `reader` is the policy's reader (its `fail`, `mapping`, `strings`, `duration`,
    `boolean` and `place` name the file and the field of whatever is wrong)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise reader.fail(
            "notify", "expected a list of channels, e.g. [{name: ops, url: json://HOST/PATH, on: [deleted]}]"
        )
    channels: list[Channel] = []
    for i, raw in enumerate(value):
        channel = _channel(reader, raw, f"notify[{i}]")
        if channel.name in {c.name for c in channels}:
            raise reader.fail(f"notify[{i}].name", f"duplicate channel name {channel.name!r}")
        channels.append(channel)
    return tuple(channels)


def _on_key(raw: Any) -> Any:
    """A channel with its `on` key as written. YAML 1.1 reads an unquoted ``on`` as true: PyYAML gives
    the key True, and Helm's values (sigs.k8s.io/yaml) the string "true", which the chart's policy
    then carries. Either stands for `on` here (nothing else in a channel can be true)."""
    if not isinstance(raw, dict) or "on" in raw:
        return raw
    return {("on" if key is True or key == "true" else key): value for key, value in raw.items()}


def _channel(reader: Any, raw: Any, where: str) -> Channel:
    data = reader.mapping(_on_key(raw), where, CHANNEL_KEYS)
    name = data.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise reader.fail(
            f"{where}.name",
            "required: lowercase letters, digits and '-', at most 63 (metrics and "
            f"logs name the channel by it, never by its URL), got {name!r}",
        )
    url, env = _target(reader, data, where)
    owners = reader.boolean(data["owners"], f"{where}.owners") if "owners" in data else False
    on = _events(reader, data.get("on", []), f"{where}.on")
    if not on and not owners:
        raise reader.fail(
            f"{where}.on", f"a channel needs events to receive (one or more of {', '.join(EVENTS)}), or owners: true"
        )
    namespaces = reader.namespaces(data["namespaces"], f"{where}.namespaces") if "namespaces" in data else ()
    digest = reader.duration(data["digest"], f"{where}.digest") if "digest" in data else DEFAULT_DIGEST
    return Channel(
        name, on, url, env, namespaces, digest, owners, reader.place(f"{where}.{'url' if url else 'urlFromEnv'}")
    )


def _target(reader: Any, data: dict[str, Any], where: str) -> tuple[str | None, str | None]:
    """(url, urlFromEnv): exactly one. A URL is checked for its shape here, and by Apprise when the
    notifier starts (only it imports Apprise)."""
    if ("url" in data) == ("urlFromEnv" in data):
        raise reader.fail(
            where,
            "set url (an Apprise URL holding no secret) or urlFromEnv (the environment "
            "variable holding one, filled from a Secret): one of them",
        )
    if "url" in data:
        url = data["url"]
        if not isinstance(url, str) or not _URL.fullmatch(url.strip()):
            raise reader.fail(
                f"{where}.url",
                "expected an Apprise URL such as json://HOST/PATH or mailto://HOST"
                "?to=ADDRESS (https://github.com/caronc/apprise/wiki), got a value that "
                "is not one",
            )
        problem = secret_slot(url.strip())
        if problem is not None:
            # Never the value in the message: it may be the very secret the check is about.
            raise reader.fail(
                f"{where}.url",
                f"{problem}: a URL written in the policy sits in a ConfigMap every "
                "process and `kubectl get` can read; put it in a Secret and name its "
                "environment variable with urlFromEnv (docs/notifications.md)",
            )
        return url.strip(), None
    env = data["urlFromEnv"]
    if not isinstance(env, str) or not _ENV_NAME.fullmatch(env):
        raise reader.fail(f"{where}.urlFromEnv", f"expected the name of an environment variable, got {env!r}")
    return None, env


# Schemes whose URL can say where to send with no credential slot in its host or path: the generic
# webhooks (the path is the receiver's, not a token's) and e-mail through a relay that takes no login.
# Every other Apprise scheme (slack, msteams, discord, mmost, tgram, ...) carries its token in the
# URL itself: urlFromEnv only. Said once more in the policy's schema (`url`'s pattern), for Helm.
URL_SCHEMES = ("json", "jsons", "form", "forms", "xml", "xmls", "mailto", "mailtos")
# Query parameters Apprise reads as credentials (mailto's user/pass, a webhook's token...): a name
# holding one of these is refused, whatever its value.
_SECRET_PARAM = re.compile(
    r"pass|pwd|secret|token|key|auth|bearer|sig|cred|session|cookie|user|login|code", re.IGNORECASE
)


def secret_slot(url: str) -> str | None:
    """Why `url` may hold a credential (it must not, in the policy), or None. Syntactic and fail-closed:
    a scheme outside `URL_SCHEMES`, a user or password (``user:pass@host``), a header (``?+Name=``),
    a query or payload parameter Apprise passes on (``?-name=``, ``?:name=``), or a parameter whose
    name says credential (``?token=``, ``?pass=``). The notifier checks once more with Apprise
    itself (its privacy view must equal the URL)."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in URL_SCHEMES:
        return (
            f"url takes the schemes whose URL has no slot for a credential ({', '.join(URL_SCHEMES)}); "
            f"{scheme}:// is not one (Slack's, Teams', Discord's... carry their token in the URL)"
        )
    location, _, query = rest.partition("?")
    if "@" in location.partition("/")[0]:
        return "it names a user or password (user:pass@host)"
    for param in filter(None, re.split(r"[&;]", query.partition("#")[0])):
        name = unquote_plus(param.partition("=")[0]) if not param.startswith("+") else param.partition("=")[0]
        if name[:1] in "+-:" or param[:3].lower() in ("%2b", "%2d", "%3a"):
            return (
                f"its query parameter {name[:1]}... adds a header or a field to what is sent (Apprise's "
                "+header, -query and :payload parameters may carry a token)"
            )
        if _SECRET_PARAM.search(name):
            return f"its query parameter {name!r} is a credential's"
    return None


def _events(reader: Any, value: Any, where: str) -> frozenset[str]:
    events = reader.strings(value, where) if value != [] else ()
    for i, event in enumerate(events):
        if event not in EVENTS:
            raise reader.fail(f"{where}[{i}]", f"unknown event {event!r}; expected one of {', '.join(EVENTS)}")
    return frozenset(events)


def resolve(channel: Channel, env: dict[str, str]) -> str:
    """The channel's Apprise URL, from the policy or the environment. ValueError naming the file,
    the field and the variable when it is not set (the notifier stops at start)."""
    if channel.url is not None:
        return channel.url
    assert channel.url_from_env is not None
    value = (env.get(channel.url_from_env) or "").strip()
    if not value:
        raise ValueError(
            f"{channel.place}: the environment variable {channel.url_from_env} is not set (the chart "
            "sets it from a Secret: notifications.secretEnv)"
        )
    return value


# --- an audit entry, as a notification ------------------------------------------------------------------------


def notification_of(fields: dict[str, str]) -> str | None:
    """The notification event an audit entry is, if any (one of EVENTS)."""
    event, reason = fields.get("event"), fields.get("reason")
    if event == "deletions-held":
        return "review-opened" if reason == "first-run-review" else "guard-tripped"
    if event == "held":
        return "guard-tripped" if reason == "burst" else None  # a first-run hold joins the review already told
    if event in ("scheduled", "moved"):
        return "upcoming"
    return event if event in ("deleted", "stuck", "invalid-ttl", "policy-error", "kind-not-served") else None


def group_of(event: str, namespace: str | None) -> str:
    """The digest group: one per channel, whatever the event and the namespace (at most one message
    per channel per period). Groups named ``deleted/NAMESPACE`` by earlier versions are still sent
    as they are (`jobttl.core.domain.notices.digest.render` reads any group)."""
    return ALL_GROUP


def owner_requests(value: str | None) -> tuple[str, ...]:
    """The channel names an annotation asks for: comma-separated, at most MAX_OWNER_CHANNELS. What is
    not a channel's name (a URL, say) is UNKNOWN_CHANNEL, to be refused and counted: its text is
    never kept (it may hold a token), let alone used."""
    if not value:
        return ()
    names = [part.strip() for part in value.split(",") if part.strip()]
    names = [name if _NAME.fullmatch(name) else UNKNOWN_CHANNEL for name in names]
    return tuple(dict.fromkeys(names))[:MAX_OWNER_CHANNELS]


def route(fields: dict[str, str], channels: tuple[Channel, ...]) -> Routed:
    """Which channels hear of one audit entry, in which digest group; what the job's owner asked
    for and may not have."""
    event = notification_of(fields)
    if event is None:
        return Routed(None)
    namespace = fields.get("namespace") or None
    chosen = [c.name for c in channels if event in c.on and c.covers(namespace)]
    asked, refused = _asked_by_owner(fields, channels) if event in OWNER_EVENTS else ([], [])
    chosen += asked
    group = group_of(event, namespace)
    deliveries = tuple(Delivery(name, group) for name in dict.fromkeys(chosen))
    return Routed(event, deliveries, tuple(refused), item_of(event, fields) if deliveries else {})


def _asked_by_owner(fields: dict[str, str], channels: tuple[Channel, ...]) -> tuple[list[str], list[str]]:
    """The channels a job's jobttl.io/notify asks for that take its messages, and the refused (by
    name, or UNKNOWN_CHANNEL for a name no channel has: the text is never a label)."""
    by_name = {c.name: c for c in channels}
    namespace = fields.get("namespace") or None
    asked, refused = [], []
    for name in owner_requests(fields.get("notify")):
        channel = by_name.get(name)
        if channel is not None and channel.owners and channel.covers(namespace):
            asked.append(name)
        else:
            refused.append(name if channel is not None else UNKNOWN_CHANNEL)
    return asked, refused


# What a digest keeps of an entry: enough to say it, nothing more (never the annotation's value).
_ITEM_FIELDS = (
    "at",
    "apiVersion",
    "kind",
    "namespace",
    "name",
    "due",
    "ttl",
    "ttlSource",
    "stage",
    "dryRun",
    "count",
    "heldId",
    "seen",
    "maxDeletions",
    "maxShare",
    "firstRun",
    "reason",
    "detail",
    "stuckFor",
    "finalizers",
    "resource",
    "rule",
    "field",
    "outcome",
    "previousDue",
)


def item_of(event: str, fields: dict[str, str]) -> dict[str, Any]:
    return {"event": event, **{k: fields[k] for k in _ITEM_FIELDS if k in fields}}


# --- when a group is sent ----------------------------------------------------------------------------------------


def first_due(now: float, period: int, gather: float = GATHER) -> float:
    """When a quiet group's first message goes: soon, with what comes together with it."""
    return now + min(period, gather)


def send_at(due: float, last_sent: float | None, period: int) -> float:
    """When a group due at `due` may be sent: never twice within a period."""
    return due if last_sent is None else max(due, last_sent + period)


def retry_delay(attempts: int, first: float = RETRY_FIRST) -> float:
    """Seconds before a message that failed `attempts` times is tried again."""
    return float(min(first * 2 ** max(0, attempts - 1), RETRY_MAX))


def gives_up(attempts: int) -> bool:
    return attempts >= ATTEMPTS


# --- what may be said of a channel -----------------------------------------------------------------------------

_SECRET_MIN = 4  # characters: shorter parts of a URL (a port, "hook") are left as they are


def redacted(text: str, url: str) -> str:
    """`text` (an error a channel gave) without the parts of `url` that may be secret: the whole URL,
    its user and password, each path segment and query value (tokens live there: slack://T/B/TOKEN)."""
    rest = url.partition("://")[2]
    location, _, query = rest.partition("?")
    netloc, _, path = location.partition("/")
    userinfo = netloc.rpartition("@")[0]
    parts = {url, rest, *userinfo.split(":"), *path.split("/"), *(p.partition("=")[2] for p in query.split("&"))}
    for part in sorted((p for p in parts if len(p) >= _SECRET_MIN), key=len, reverse=True):
        text = text.replace(part, "***")
    return text
