"""The Lua jobttl runs inside Redis, and one typed wrapper per script: how each is called.

Why scripts: a reconcile must compare the decision with what is pending and then write the
index, the audit entry and the job's history without another process slipping in between.
A lock costs several round trips per event (SET, the reads, the writes, DEL) and serialises
the sink's threads on it; a script does the same in one, on Redis's own clock (``TIME``),
so the guard's and the schedule's notion of "now" never depends on a process's clock.

Each script is a file in ``core/store/lua/`` (shipped in the package) and a dataclass here
(`Script`): its fields are the script's arguments, named and typed, and their order is the
order of ARGV; ``KEYS`` names its keys, in order, each a constant or made from the fields. The file never
reads ``ARGV[n]``: the source Redis runs is a header made from the wrapper (``local member =
ARGV[1]``, ``local due = tonumber(ARGV[4])``, ...), then the shared prelude (``lua/prelude.lua``)
for the scripts that ask for it, then the file. So the calling convention is said once, in
Python, and a script that reads a name its wrapper does not send fails in its contract test
(Redis refuses globals). ``Script.parse`` turns the reply into a typed value.

Scripts, not a Redis Function library (Redis 7): a library is loaded under one name for every
process, so during a rolling upgrade the new release's FUNCTION LOAD REPLACE would change the
functions under the old release's processes, argument orders and all. Scripts are named by
their SHA1: each release runs its own, side by side, and nothing is left to delete after.
What a library would save (loading after a restart) `execute` and `load` already do.

RQ's jobs are written by RQ's code (`jobttl.core.store.protocol`); the scripts only read them, remove
one a reconcile replaced (RETIRE), or tidy one RQ has just written (BOOKED). The scripts
assume a single Redis (or a Sentinel-managed primary): they touch keys derived from their
arguments, which Redis Cluster does not allow.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import operator
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, TypeVar, Union, dataclass_transform, get_args, get_origin, get_type_hints

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import NoScriptError, RedisError

from jobttl.core.store import keys
from jobttl.core.runtime import logs
from jobttl.core.domain.decisions.due import Override
from jobttl.core.domain.wire.identity import JobRef

log = logging.getLogger("jobttl.scripts")

LUA = Path(__file__).resolve().with_name("lua")
_LUA_WORDS = {
    "and",
    "break",
    "do",
    "else",
    "elseif",
    "end",
    "false",
    "for",
    "function",
    "if",
    "in",
    "local",
    "nil",
    "not",
    "or",
    "repeat",
    "return",
    "then",
    "true",
    "until",
    "while",
}

ALL: list[type[Script]] = []  # every script loaded when a process starts, in that order
WRAPPERS: list[type[Script]] = []  # every script, loaded at start or not
_BY_SHA: dict[str, type[Script]] = {}  # SHA1 → script: a NOSCRIPT of one of them loads ALL


def unsent(**options: Any) -> Any:
    """A wrapper's field that is not an argument of the script (what its keys are made of)."""
    return dataclasses.field(metadata={"sent": False}, **options)


def rest() -> Any:
    """The last argument: a variable number of values (a mapping is sent as key, value, ...);
    the script reads them as one table."""
    return dataclasses.field(default=(), metadata={"rest": True})


def _prelude_names(prelude: str) -> set[str]:
    names = set()
    for line in prelude.splitlines():  # its top level: what a script's own locals would shadow
        words = line.split() if line.startswith("local ") else []
        if words[:2] == ["local", "function"]:
            names.add(words[2].split("(")[0])
        elif words[:1] == ["local"]:
            names.update(w.strip(",") for w in words[1 : words.index("=")] if "=" in words)
    return names


_PRELUDE = (LUA / "prelude.lua").read_text()
_PRELUDE_NAMES = _prelude_names(_PRELUDE)


def _lua_read(name: str, index: int, hint: Any, is_rest: bool) -> str:
    """The header line that names one argument, converted as its Python type says."""
    if is_rest:
        return f"local {name} = {{unpack(ARGV, {index})}}"
    optional = get_origin(hint) in (Union, types.UnionType) and type(None) in get_args(hint)
    base = next(a for a in get_args(hint) if a is not type(None)) if optional else hint
    if base is bool:
        return f"local {name} = ARGV[{index}] == '1'"
    if base in (int, float):
        return f"local {name} = tonumber(ARGV[{index}])"  # "" (None) is nil
    if base is str:
        return (
            f"local {name} = ARGV[{index}] ~= '' and ARGV[{index}] or nil"
            if optional
            else f"local {name} = ARGV[{index}]"
        )
    raise TypeError(f"{name}: a script argument is a str, int, float or bool (or None), not {hint}")


@dataclass_transform(kw_only_default=True)
def script(file: str, *, prelude: bool = False, preload: bool = True) -> Callable[[type[S]], type[S]]:
    """Make a class the wrapper of `file` (in core/store/lua/): a dataclass of keyword arguments
    (slotted, not frozen: a reconcile makes three per member, and frozen doubles their cost).

    `preload`: loaded with the others when a process starts, and after any NOSCRIPT (`load`,
    `execute`), as every script that may run in a MULTI must be. A script that only ever runs
    on its own is loaded when Redis first says it does not know it."""

    def wrap(cls: type[S]) -> type[S]:
        cls = dataclasses.dataclass(kw_only=True, slots=True)(cls)
        hints = get_type_hints(cls)
        sent = _sent_fields(cls, prelude)
        cls.file = file
        cls.source = _named_source(cls, file, hints, sent, prelude)
        # EVALSHA's name for the script, not a secret: usedforsecurity=False lets a FIPS-mode OpenSSL compute it.
        cls.sha = hashlib.sha1(cls.source.encode(), usedforsecurity=False).hexdigest()
        _set_readers(cls, hints, sent)
        cls.preloaded = preload
        WRAPPERS.append(cls)
        if preload:
            ALL.append(cls)
        _BY_SHA[cls.sha] = cls
        return cls

    return wrap


def _sent_fields(cls: type[Script], prelude: bool) -> list[dataclasses.Field[Any]]:
    """The fields a script wrapper sends as ARGV, in order; TypeError when a field but the last takes
    the rest, or when a name would clash in Lua (another KEY or argument, a Lua word, or a name the
    prelude defines)."""
    sent = [f for f in dataclasses.fields(cls) if f.metadata.get("sent", True)]
    rests = [f for f in sent if f.metadata.get("rest")]
    if (rests and sent[-1] is not rests[0]) or len(rests) > 1:
        raise TypeError(f"{cls.__name__}: only the last argument may take the rest")
    names = list(cls.KEYS) + [f.name for f in sent]
    clash = {n for n in names if names.count(n) > 1 or n in _LUA_WORDS or (prelude and n in _PRELUDE_NAMES)}
    if clash:
        raise TypeError(f"{cls.__name__}: {', '.join(sorted(clash))} cannot name a KEY or argument")
    return sent


def _named_source(
    cls: type[Script], file: str, hints: dict[str, Any], sent: list[dataclasses.Field[Any]], prelude: bool
) -> str:
    """The script as Redis runs it: a header naming its KEYS and ARGV as locals, the prelude if
    asked for, then the file."""
    header = [f"-- {file}, as jobttl.core.store.scripts.{cls.__name__} calls it: its KEYS and ARGV, named"]
    header += [f"local {name} = KEYS[{i}]" for i, name in enumerate(cls.KEYS, 1)]
    header += [_lua_read(f.name, i, hints[f.name], bool(f.metadata.get("rest"))) for i, f in enumerate(sent, 1)]
    body = (LUA / file).read_text()
    return "\n".join(header) + "\n" + (_PRELUDE if prelude else "") + body


def _set_readers(cls: Any, hints: dict[str, Any], sent: list[dataclasses.Field[Any]]) -> None:
    """What `execute` reads a call's arguments with: one attrgetter of the plain fields, and which of
    them are flags and which optional; the field taking the rest, if any."""
    plain = [f for f in sent if not f.metadata.get("rest")]
    rests = [f for f in sent if f.metadata.get("rest")]
    cls._read = operator.attrgetter(*(f.name for f in plain)) if plain else staticmethod(lambda call: ())
    cls._single = len(plain) == 1  # attrgetter of one name answers the value, not a tuple
    cls._flags = tuple(i for i, f in enumerate(plain) if hints[f.name] is bool)
    cls._optional = tuple(i for i, f in enumerate(plain) if type(None) in get_args(hints[f.name]))
    cls._rest = rests[0].name if rests else None


class Script:
    """A script's call: its arguments as fields (see the module docstring)."""

    __slots__ = ()

    KEYS: ClassVar[Mapping[str, str | Callable[[Any], str]]] = {}  # name → the key, or how to make it
    file: ClassVar[str]
    source: ClassVar[str]
    sha: ClassVar[str]
    preloaded: ClassVar[bool]
    _read: ClassVar[Callable[[Any], Any]]
    _single: ClassVar[bool]
    _flags: ClassVar[tuple[int, ...]]
    _optional: ClassVar[tuple[int, ...]]
    _rest: ClassVar[str | None]

    def keys(self) -> list[str]:
        return [key if key.__class__ is str else key(self) for key in self.KEYS.values()]

    def argv(self) -> list[Any]:
        """ARGV as sent: None as "", a bool as "1" or "0", the rest spread (a mapping as key,
        value, ...; its values as they are). Every reconcile sends some forty: kept cheap."""
        args = [self._read(self)] if self._single else list(self._read(self))
        for i in self._flags:
            args[i] = "1" if args[i] else "0"
        for i in self._optional:
            if args[i] is None:
                args[i] = ""
        if self._rest is not None:
            values = getattr(self, self._rest)
            args.extend(itertools.chain.from_iterable(values.items()) if isinstance(values, Mapping) else values)
        return args

    @classmethod
    def parse(cls, reply: Any) -> Any:
        """The script's reply as a Python value (the raw reply unless a wrapper says otherwise)."""
        return reply

    def queue(self, pipe: Pipeline) -> None:
        """EVALSHA on a pipeline (plain or MULTI), without a round trip of its own: `execute` runs it."""
        keys_ = self.keys()
        pipe.evalsha(self.sha, len(keys_), *keys_, *self.argv())

    def run(self, client: Redis | Pipeline) -> Any:
        """Run it now (or queue it, on a pipeline); the parsed reply. A Redis that lost its
        scripts (a restart, a failover) has them all loaded again, then runs it."""
        if isinstance(client, Pipeline):
            return self.queue(client)
        keys_ = self.keys()
        try:
            reply = client.evalsha(self.sha, len(keys_), *keys_, *self.argv())
        except NoScriptError:
            if self.preloaded:
                with client.pipeline(transaction=False) as pipe:
                    _queue_loads(pipe)
                    pipe.execute()
            else:
                client.script_load(self.source)
            reply = client.evalsha(self.sha, len(keys_), *keys_, *self.argv())
        return self.parse(reply)


S = TypeVar("S", bound=Script)


def _text(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


def _number(value: bytes | str | None) -> int | None:
    text = _text(value)
    return int(float(text)) if text else None


# --- the schedule's write protocol (jobttl.core.store.protocol) --------------------------------------------


class ReconcileReply(NamedTuple):
    change: str  # a jobttl.core.domain.decisions.plan.Change value, or "override" (then nothing was written)
    due: int | None  # the due time now pending, or to book
    previous_due: int | None  # what was pending before, if anything
    previous_state: str | None  # the RQ job status of what was pending before
    now: float  # Redis's clock when the script ran
    reason: str | None  # why nothing is to be booked, when the script says so
    said: tuple[str, str] | None  # "override": the operator's keep and until, as stored ("" for none)


@script("reconcile.lua", prelude=True)
class Reconcile(Script):
    """Compare one member's decision with what is pending; write what needs no RQ job."""

    KEYS = {
        "index": keys.PENDING_INDEX,
        "override": lambda s: keys.override(s.ref.uid),
        "audit_stream": keys.AUDIT_STREAM,
        "card": lambda s: keys.card(s.ref.namespace, s.ref.name),
        "held": keys.HELD,
        "recent": keys.RECENT_DUE,
        "tombstone": lambda s: keys.tombstone(s.ref.namespace, s.ref.name, s.ref.uid),
        "outbox": lambda s: s.outbox,
        "dry_kinds": keys.DRY_RUN,
        "namespaces": keys.NAMESPACES,
    }
    ref: JobRef = unsent()
    outbox: str = unsent()  # the notices outbox of the queue (keys.notices)
    member: str
    uid: str
    expiring: bool  # the decision expires: a tombstone, a stage done, or the override can stop it
    due: int | None  # when to delete it, decided with `keep_seen` and `until_seen`; None: not to be
    reason: str  # why not (a verdict, "gone", "kept-by-operator", ...): the cancellation's reason
    keep_seen: str  # the override `due` was decided with, as stored ("": none); checked if expiring
    until_seen: str
    keep_for: int | None  # refresh the override's expiry (an operator's keep lasts while it is read)
    collect: bool  # a deletion that is news is answered "due-now", not booked (a resync judges them)
    burst_limit: int | None  # hold news once this many came due within `burst_window` (None: no limit)
    burst_window: int
    news_horizon: int  # jobttl.core.store.guard.is_news
    job_prefix: str  # the key of the member's RQ jobs, less "<uid>-<due>" ("rq:job:delete-")
    dry_run: bool
    unbooked: str | None  # the card's decision (JSON) when nothing is booked
    held_entry: str  # the held set's entry (jobttl.core.store.guard.HeldDeletion), if the burst holds it
    audit_max: int
    card_ttl: int
    echo: bool  # the object is going away and someone other than its deletion's RQ job says so
    invalid: str | None  # the InvalidTTL notice for the outbox
    fields: Mapping[str, str] = rest()  # the audit entry's, less the event, due times and reason

    @classmethod
    def parse(cls, reply: list[bytes]) -> ReconcileReply:
        change, due, previous, state, now, reason, *said = (_text(part) for part in reply)
        return ReconcileReply(
            change,
            _number(due),
            _number(previous),
            state or None,
            float(now),
            reason or None,
            (said[0], said[1]) if said else None,
        )


class CommitReply(NamedTuple):
    change: str  # "scheduled", "moved", "unchanged" or "kept"
    due: int
    previous_due: int | None


@script("commit.lua", prelude=True)
class Commit(Script):
    """Record a booking, in the MULTI that writes its RQ job."""

    KEYS = {
        "index": keys.PENDING_INDEX,
        "audit_stream": keys.AUDIT_STREAM,
        "card": lambda s: keys.card(s.ref.namespace, s.ref.name),
        "override": lambda s: keys.override(s.ref.uid),
        "dry_kinds": keys.DRY_RUN,
        "namespaces": keys.NAMESPACES,
    }
    ref: JobRef = unsent()
    member: str
    uid: str
    namespace: str  # where the namespace index files it (the ref's)
    due: int
    seen: int | None  # what RECONCILE saw pending
    audit_max: int
    card_ttl: int
    dry_run: bool
    fields: Mapping[str, str] = rest()

    @classmethod
    def parse(cls, reply: list[bytes]) -> CommitReply:
        change, due, previous = (_text(part) for part in reply)
        return CommitReply(change, int(due), _number(previous))


@script("retire.lua")
class Retire(Script):
    """Take out an RQ job a reconcile replaced, unless the index names it again or it runs."""

    KEYS = {
        "index": keys.PENDING_INDEX,
        "job": lambda s: s.job_key,
        "dependents": lambda s: s.dependents,
        "dependencies": lambda s: s.dependencies,
        "results": lambda s: s.results,
        "queue": lambda s: s.queue_key,
        "scheduled": lambda s: s.registries[0],
        "finished": lambda s: s.registries[1],
        "failed": lambda s: s.registries[2],
        "deferred": lambda s: s.registries[3],
    }
    job_key: str = unsent()
    dependents: str = unsent()
    dependencies: str = unsent()
    results: str = unsent()
    queue_key: str = unsent()
    registries: tuple[str, str, str, str] = unsent()  # scheduled, finished, failed, deferred (RQ's)
    member: str
    due: int
    job_id: str

    @classmethod
    def parse(cls, reply: int) -> bool:
        return bool(reply)


@script("booked.lua")
class Booked(Script):
    """Tidy an RQ job just written over an earlier run's; post its notice."""

    KEYS = {
        "job": lambda s: s.job_key,
        "finished": lambda s: s.finished,
        "failed": lambda s: s.failed,
        "outbox": lambda s: s.outbox,
    }
    job_key: str = unsent()
    finished: str = unsent()  # RQ's registries of the queue
    failed: str = unsent()
    outbox: str = unsent()
    job_id: str
    status: str  # as booked: only a job still so is tidied
    notice: str | None  # the notices outbox's entry (jobttl.core.store.schedule.notice_member)
    notice_at: float
    omitted: tuple[str, ...] = rest()  # the fields RQ's write left out


# --- the worker's deletion (jobttl.core.services.deletion, .follow) ----------------------------------------


class BeginReply(NamedTuple):
    pending_due: int | None  # what the index holds for the member
    seconds: int  # Redis's clock
    micros: int
    override: Override
    intent: bytes  # what a run wrote before its DELETE, or b""
    busy: bool  # another run holds the claim


@script("begin.lua")
class Begin(Script):
    """Is the deletion still pending, what did operators say, is another run at work?"""

    KEYS = {
        "index": keys.PENDING_INDEX,
        "override": lambda s: keys.override(s.uid),
        "claim": lambda s: keys.claim(s.member),
        "intent": lambda s: keys.intent(s.member),
    }
    uid: str = unsent()
    member: str
    step: str  # "start" (the claim is taken) or "delete" (the intent is written)
    token: str  # this run's
    claim_seconds: int
    intent_entry: str  # for "delete"

    @classmethod
    def parse(cls, reply: list[bytes]) -> BeginReply:
        due, seconds, micros, keep, until, intent, busy = reply
        return BeginReply(
            _number(due), int(seconds), int(micros), Override.read(keep, until), intent or b"", busy == b"busy"
        )


@script("finish.lua", prelude=True)
class Finish(Script):
    """Record a deletion's outcome; the claim and the intent end with it. Returns the entry's id."""

    KEYS = {
        "index": keys.PENDING_INDEX,
        "audit_stream": keys.AUDIT_STREAM,
        "card": lambda s: keys.card(s.ref.namespace, s.ref.name),
        "tombstone": lambda s: keys.tombstone(s.ref.namespace, s.ref.name, s.ref.uid),
        "terminating": keys.TERMINATING,
        "terminating_info": keys.TERMINATING_INFO,
        "claim": lambda s: keys.claim(s.member),
        "intent": lambda s: keys.intent(s.member),
        "override": lambda s: keys.override(s.ref.uid),
        "dry_kinds": keys.DRY_RUN,
        "namespaces": keys.NAMESPACES,
    }
    ref: JobRef = unsent()
    member: str
    uid: str
    due: int
    forget: bool  # the pending entry ends, if it is still this one (not for would-delete)
    stages_too: bool  # and, for the job itself, its pods stage (not when it is held, not gone)
    audit_max: int
    card_ttl: int
    tombstone_entry: str | None
    tombstone_ttl: int
    follow_at: float | None  # when to look again at an object still there (delete-requested)
    follow_info: str | None
    done: str | None  # a stage that ran for good
    override_ttl: int
    entry: Mapping[str, str] = rest()  # the audit entry, event first

    @classmethod
    def parse(cls, reply: bytes) -> str:
        return _text(reply)

    @classmethod
    def of(
        cls,
        ref: JobRef,
        member: str,
        due: int,
        entry: Mapping[str, str],
        *,
        forget: bool,
        max_entries: int,
        card_ttl: int,
        tombstone: str | None = None,
        tombstone_ttl: int = 0,
        follow: float | None = None,
        info: str | None = None,
        done: str | None = None,
        override_ttl: int = 0,
        stages_too: bool = True,
    ) -> Finish:
        """FINISH for a deletion of `ref` (the call the worker's steps make)."""
        return cls(
            ref=ref,
            member=member,
            uid=ref.uid,
            due=due,
            forget=forget,
            stages_too=stages_too,
            audit_max=max_entries,
            card_ttl=card_ttl,
            tombstone_entry=tombstone,
            tombstone_ttl=tombstone_ttl,
            follow_at=follow,
            follow_info=info,
            done=done,
            override_ttl=override_ttl,
            entry=entry,
        )


@script("release.lua")
class Release(Script):
    """A run's claim back (only its own), and its intent unless its DELETE may have been applied."""

    KEYS = {"claim": lambda s: keys.claim(s.member), "intent": lambda s: keys.intent(s.member)}
    member: str = unsent()
    token: str
    clear_intent: bool


# --- records -------------------------------------------------------------------------------------


@script("record.lua", prelude=True)
class Record(Script):
    """One audit entry from Python, and the job's history card. Returns the entry's id."""

    KEYS = {
        "audit_stream": keys.AUDIT_STREAM,
        "card": lambda s: keys.card(s.ref.namespace, s.ref.name) if s.ref else "",
    }
    ref: JobRef | None = unsent()  # None: the entry is about no job
    audit_max: int
    card_ttl: int
    uid: str | None
    entry: Mapping[str, str] = rest()

    @classmethod
    def parse(cls, reply: bytes) -> str:
        return _text(reply)


class KeepLastFileReply(NamedTuple):
    rank: int | None  # None: in no group
    beyond_at: int | None  # when this job fell beyond its group's limit (None: within it)
    pushed_out: tuple[tuple[str, bytes, int, int], ...]  # (uid, record, rank, when) of jobs now beyond


@script("keeplast_file.lua")
class KeepLastFile(Script):
    """File one finished job in its keepLast group (jobttl.core.store.keeplast_index)."""

    KEYS = {"records": keys.KEEPLAST_RECORDS, "index": keys.PENDING_INDEX}
    prefix: str  # the groups' key prefix (keys.KEEPLAST_PREFIX)
    uid: str
    group: str | None  # None: in no group (take it out)
    finished_at: int
    limit: int
    record: str
    most: int  # most pushed-out jobs to answer

    @classmethod
    def parse(cls, reply: list) -> KeepLastFileReply:
        rank, beyond_at, *rest_ = reply
        pushed = tuple(
            (_text(rest_[i]), rest_[i + 1], int(rest_[i + 2]), int(rest_[i + 3])) for i in range(0, len(rest_), 4)
        )
        return KeepLastFileReply(None if int(rank) < 0 else int(rank), _number(beyond_at), pushed)


@script("dry_run_file.lua", prelude=True)
class DryRunFile(Script):
    """File one member among the dry-run records and in the namespace index as its RQ job's meta
    says (or take it out of both). True if it is a dry-run record."""

    KEYS = {"index": keys.PENDING_INDEX, "dry_kinds": keys.DRY_RUN, "namespaces": keys.NAMESPACES}
    member: str
    job_prefix: str  # the key of its RQ job without the due time ("rq:job:delete-<uid>-")
    seen_in: str | None = None  # the namespace whose set it was found in (taken out of it unless filed there)

    @classmethod
    def parse(cls, reply: int) -> bool:
        return bool(reply)


@dataclasses.dataclass(frozen=True)
class DueCounts:
    """What is due by some times: deletions, and dry-run records by kind."""

    due: tuple[int, ...]  # per time: pending deletions due by then, dry-run records not counted
    dry_run: dict[str, tuple[int, ...]]  # per kind (Kind.group), per time: dry-run records due by then

    @classmethod
    def parse(cls, reply: list[Any], times: int) -> DueCounts:
        kinds = reply[times:]
        return cls(
            tuple(int(n) for n in reply[:times]),
            {
                _text(kinds[i]): tuple(int(n) for n in kinds[i + 1 : i + 1 + times])
                for i in range(0, len(kinds), times + 1)
            },
        )

    def dry_run_total(self, time_index: int = 0) -> int:
        return sum(counts[time_index] for counts in self.dry_run.values())


@script("due_counts.lua")
class CountDue(Script):
    """How many are due by each time, dry-run records apart, in one read."""

    KEYS = {"index": keys.PENDING_INDEX, "dry_kinds": keys.DRY_RUN}
    times: tuple[float, ...] = rest()

    @classmethod
    def parse(cls, reply: list[Any]) -> Any:
        return reply  # DueCounts.parse needs how many times were asked: the caller knows

    def counts(self, reply: list[Any]) -> DueCounts:
        return DueCounts.parse(reply, len(self.times))


# --- scripts that run on their own ------------------------------------------------------------------


@script("rate_reserve.lua", preload=False)
class ReserveSlot(Script):
    """The next deletion's slot under the shared rate limit (jobttl.core.store.ratelimit). Returns the
    microseconds to wait for it."""

    KEYS = {"timeline": lambda s: s.key}
    key: str = unsent()
    interval: int  # microseconds between two slots

    @classmethod
    def parse(cls, reply: int) -> int:
        return int(reply)


@script("follow_claim.lua", preload=False)
class ClaimFollowUps(Script):
    """Deleted objects due for another look, claimed for a while (jobttl.core.services.follow)."""

    KEYS = {"terminating": keys.TERMINATING}
    now: float
    lease: int  # seconds the others leave them alone
    batch: int

    @classmethod
    def parse(cls, reply: list[bytes]) -> list[str]:
        return [_text(member) for member in reply]


class ResyncSlotReply(NamedTuple):
    outcome: str  # "now", "deferred" or "coalesced" (jobttl.core.store.schedule.Schedule.request_resync_soon)
    at: int  # when the resync runs (epoch seconds, Redis's clock)


@script("resync_slot.lua", preload=False)
class ResyncSlot(Script):
    """When a resync an event asked for may run: at most one per `min_interval` seconds."""

    KEYS = {"next": lambda s: keys.resync_next(s.queue)}
    queue: str = unsent()
    min_interval: int

    @classmethod
    def parse(cls, reply: list[bytes]) -> ResyncSlotReply:
        return ResyncSlotReply(_text(reply[0]), int(reply[1]))


# --- sending them ------------------------------------------------------------------------------------


def execute(pipe: Pipeline) -> list[Any]:
    """Execute a pipeline holding scripts: one round trip, and one more only when Redis has lost
    a script (then every script is loaded, and the commands that did not run run again, in
    order). Each script's reply comes back parsed (`Script.parse`). Raises the first error, as
    redis-py's execute does.

    The second round trip goes on `pipe` itself: the same class (the sink's waits for its
    replicas), the same pool. In a MULTI the commands that did run stay applied, and the
    scripts that did not run go in a second MULTI, still after the RQ writes they followed.
    Processes load every script when they start (`load`), and after any NOSCRIPT, so a MULTI
    meets one only when Redis lost its scripts between a reconcile's two round trips, or the
    first time a new version's script runs on a Redis nobody loaded it into. For that moment
    another client may see an RQ job written and not yet committed (a worker finds it
    superseded, and the next event or resync books it), or committed and not yet tidied
    (BOOKED leaves alone a job that ran since): late, never early.
    """
    stack = list(pipe.command_stack)
    transaction = pipe.transaction or pipe.explicit_transaction
    replies = pipe.execute(raise_on_error=False)
    missing = [
        i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError) and _script_of(stack[i]) is not None
    ]
    if missing:
        if transaction and not pipe.transaction:
            pipe.multi()
        _queue_loads(pipe)
        for i in missing:
            args, options = stack[i]
            pipe.execute_command(*args, **options)
        again = pipe.execute(raise_on_error=False)
        for reply in again[: len(ALL)]:
            if isinstance(reply, Exception):
                raise reply  # a user that may not load scripts: say so, not NOSCRIPT
        for i, reply in zip(missing, again[len(ALL) :]):
            replies[i] = reply
    for i, reply in enumerate(replies):
        if isinstance(reply, Exception):
            raise reply
        found = _script_of(stack[i])
        if found is not None:
            replies[i] = found.parse(reply)
    return replies


def _script_of(command: tuple) -> type[Script] | None:
    args = command[0]
    return _BY_SHA.get(str(args[1])) if args and args[0] == "EVALSHA" else None


def load(redis: Redis) -> bool:
    """SCRIPT LOAD every script, in one round trip: what a process does when it starts, so that
    a MULTI rarely meets a NOSCRIPT. False (and a warning) if Redis would not: it is tried again
    on the first NOSCRIPT."""
    try:
        with redis.pipeline(transaction=False) as pipe:
            _queue_loads(pipe)
            pipe.execute()
        return True
    except RedisError as exc:
        logs.record(log, "scripts-not-loaded", level=logging.WARNING, detail=str(exc))
        return False


def _queue_loads(pipe: Pipeline) -> None:
    for found in ALL:
        pipe.script_load(found.source)
