"""Every Redis key jobttl writes, named once (RQ's own keys are RQ's business).

All live under ``jobttl:``; the README's "The schedule in Redis" lists what each holds.
"""

SCHEMA = "jobttl:schema"  # the layout version of everything below ("2"); see jobttl.core.store.upgrade

# The schedule (jobttl.core.store.schedule)
PENDING_INDEX = "jobttl:pending"  # zset: member (uid, or pods:<uid>) → due time
OVERRIDE_PREFIX = "jobttl:override:"  # hash per uid: an operator's keep / until
# The dry-run records beside the index: what dry run would delete, counted without reading records.
# By kind as Kind.group (jobttl.core.domain.kinds.registry.group_kind): batch/v1 Job and Volcano's Job are two.
DRY_RUN = "jobttl:dry-run:kinds"  # set: the kinds that have had dry-run records; dry_run(kind) is one of them
DRY_RUN_INDEXED = "jobttl:schema:dry-run"  # DRY_RUN_LAYOUT once an older layout's records beside the index are filed
# "1": filed by bare Kind, in LEGACY_DRY_RUN; "2": by Kind.group, no namespace index; "3": both records below
# (jobttl.core.store.upgrade files what an older layout lacks).
DRY_RUN_LAYOUT = "3"
LEGACY_DRY_RUN = "jobttl:dry-run"  # set: the bare Kinds of the sets "jobttl:dry-run:<Kind>" (until 0.2.x)
# The namespace index beside the index: what `?namespace=` and `jobttl pending --namespace` read. The
# scripts that write the index keep it in the same atomic step; the hash says where each member is
# filed, so taking one out never depends on what a caller says its namespace is.
NAMESPACES = "jobttl:namespaces"  # hash: member → its namespace (the index's members that have a record)
NAMESPACE_PREFIX = NAMESPACES + ":"  # zset per namespace: its index members → the same due time

# The audit trail and each job's history (jobttl.core.store.audit)
AUDIT_STREAM = "jobttl:audit"
CARD_PREFIX = "jobttl:job:"  # hash per namespace/name: per uid, its latest decision and audit ids
TOMBSTONE_PREFIX = "jobttl:tombstone:"  # string per namespace:name:uid

# The blast-radius guard (jobttl.core.store.guard)
HELD = "jobttl:held"  # hash: member → the decision held for confirmation
HELD_ID = "jobttl:held:id"  # digest of the held members, which a confirmation must name
INSTALL = (
    "jobttl:install"  # hash: the install record's mirror (jobttl.core.services.install; the truth is the ConfigMap)
)
RECENT_DUE = "jobttl:guard:recent"  # zset: members newly due in the last minute (events' burst guard)

# Deletions on their way (jobttl.worker)
CLAIM_PREFIX = "jobttl:claim:"  # string per member: the worker run deleting it (one at a time)
INTENT_PREFIX = "jobttl:deleting:"  # string per member: a DELETE is about to be sent (what, when)
TERMINATING = "jobttl:terminating"  # zset: member → when to look again (DELETE sent, object still there)
TERMINATING_INFO = "jobttl:terminating:info"  # hash: member → what was deleted, and when
STUCK = "jobttl:stuck"  # hash: member → what blocks it

# Resync (jobttl.core.services.resync)
RESYNC_LOCK = "jobttl:resync:lock"
RESYNC_LAST = "jobttl:resync:last"  # the last report (JSON)
RESYNC_LAST_SUCCESS = "jobttl:resync:last-success"  # when the last complete one finished
# string per queue: when the latest resync an event asked for runs (epoch seconds): requests within
# the minimum interval after it are deferred to one resync, or coalesced into the one deferred already.
RESYNC_NEXT_PREFIX = "jobttl:resync:next:"

# keepLast (jobttl.core.domain.decisions.keeplast, its index jobttl.core.store.keeplast_index)
KEEPLAST_PREFIX = "jobttl:keep:"  # zset per group: uid → finish time
KEEPLAST_RECORDS = "jobttl:keep-records"  # hash: uid → its group and what a decision about it needs

# DeletionScheduled Events (jobttl.core.services.scheduled_events)
NOTICES_PREFIX = "jobttl:notices:"  # zset per queue: "<member>|<due>" → when to post it (its workers drain it)

# Notifications (jobttl.core.store.notifications): the notifier reads the audit trail as a consumer group
NOTIFY_GROUP = "jobttl-notify"  # the consumer group on AUDIT_STREAM (not a key)
NOTIFY_PREFIX = "jobttl:notify:"

# Archives (jobttl.core.domain.decisions.archive)
ARCHIVE_PRUNE_LOCK = "jobttl:archive:prune-lock"

# Locks held for a moment by one process
SWEEP_CURSOR = "jobttl:sweep:cursor"  # where in the overdue part of the index the next sweep looks
SWEEP_LOCK = "jobttl:sweep:lock"  # one worker at a time sweeps for lost deletions (jobttl.core.services.sweep)
UPGRADE_LOCK = "jobttl:upgrade:lock"  # one process at a time upgrades the layout (jobttl.core.store.upgrade)

# Clocks and the rate limit
CLOCKS = "jobttl:clocks"  # hash: worker name → its measured offsets (JSON)
RATE_LIMIT = "jobttl:ratelimit:delete"


# Errors of the policy's declarations (jobttl.core.store.policy_errors)
POLICY_ERRORS = "jobttl:policy-errors"  # hash: declaration (apiVersion/Kind) → its latest report (JSON)
POLICY_ERRORS_COUNT = "jobttl:policy-errors:count"  # hash: declaration → reports so far
POLICY_ERROR_SEEN_PREFIX = "jobttl:policy-error:seen:"  # string per (declaration, object, error), expiring


def policy_error_seen(digest: str) -> str:
    return POLICY_ERROR_SEEN_PREFIX + digest


def override(uid: str) -> str:
    return OVERRIDE_PREFIX + uid


def dry_run(group_kind: str) -> str:
    """zset per kind (``Job.batch``): the index's dry-run members → the same due time (a subset of the index)."""
    return f"{DRY_RUN}:{group_kind}"


def resync_next(queue: str) -> str:
    return RESYNC_NEXT_PREFIX + queue


def namespace_index(namespace: str) -> str:
    """zset per namespace: the index's members of that namespace → the same due time (a subset of the index)."""
    return NAMESPACE_PREFIX + namespace


def card(namespace: str, name: str) -> str:
    return f"{CARD_PREFIX}{namespace}/{name}"


def tombstone(namespace: str, name: str, uid: str) -> str:
    return f"{TOMBSTONE_PREFIX}{namespace}:{name}:{uid}"


def claim(member: str) -> str:
    return CLAIM_PREFIX + member


def intent(member: str) -> str:
    return INTENT_PREFIX + member


def notices(queue: str) -> str:
    return NOTICES_PREFIX + queue


def notify_buffer(channel: str, group: str) -> str:
    """list per channel and digest group: the entries waiting to be told (JSON)."""
    return f"{NOTIFY_PREFIX}buffer:{channel}:{group}"


def notify_due(channel: str) -> str:
    """zset per channel: digest group → when its message is due (or tried again)."""
    return f"{NOTIFY_PREFIX}due:{channel}"


def notify_state(channel: str) -> str:
    """hash per channel: per digest group, `<group>:count` (entries filed, told or not), `<group>:last`
    (when its last message went) and `<group>:attempts` (failed tries of the message now due)."""
    return f"{NOTIFY_PREFIX}state:{channel}"


def notify_lock(channel: str, group: str) -> str:
    """string: the notifier sending this group's message now (one at a time)."""
    return f"{NOTIFY_PREFIX}lock:{channel}:{group}"


def notify_once(token: str) -> str:
    """string: a held set already told (review-opened, guard-tripped: once per held id)."""
    return f"{NOTIFY_PREFIX}once:{token}"


def console_session(digest: str) -> str:
    """string, with a TTL: a console sign-in's Kubernetes token, by the SHA-256 of the session's id
    (the browser's cookie holds the id only, never the token)."""
    return f"jobttl:console:session:{digest}"
