"""The notifier process (`jobttl notify`): reads the audit trail, files each entry into the digests of
the channels that hear of it, and sends each digest when it is due.

Why a process of its own, not a thread of the worker: it needs what the worker must not have and
nothing the worker has. It holds the channels' secrets (webhook tokens, SMTP passwords, from a
Secret) and talks to the internet, but no Kubernetes credentials: the chart runs it with a service
account that has no API token, and a channel URL that points somewhere it should not (a job
owner's channel, a mistake) reaches from a pod that can delete nothing. The worker, which can
delete every job, keeps no secret of anyone's and sends nothing outside the cluster. And nothing
it does can slow a deletion: it shares no process, thread, queue or lock with the worker, only the
audit trail it reads after the fact.

Threads: one reads the trail (a consumer of the group, `jobttl.core.store.notifications`), one per
channel sends that channel's digests, so a channel that hangs or fails holds up only itself.
Several notifiers may run: the group shares the entries, a lock per digest shares the sending.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from http.server import ThreadingHTTPServer

from redis import Redis
from redis.exceptions import RedisError, ResponseError

from jobttl.core.domain.notices import digest
from jobttl.core.domain.wire import jsoncodec, shapes
from jobttl.core.domain.notices.notify import Routed, route
from jobttl.core.runtime import logs, probes
from jobttl.core.runtime.config import ConfigError, Settings
from jobttl.core.runtime.metrics import Metrics
from jobttl.core.store import redisconn
from jobttl.core.store.notifications import Batch, Entry, NotifyStore
from jobttl.notifier.channels import AppriseChannel, open_channels

log = logging.getLogger("jobttl.notify")

POLL = 0.5  # seconds between looks at a channel's due digests
RECLAIM_EVERY = 30.0  # seconds between looks for entries a dead notifier left unfiled
PAUSE = 1.0  # after an error (Redis down): try again this much later
ONCE_EVENTS = ("review-opened", "guard-tripped")  # told once per held set (its id), however often held again


class Notifier:
    def __init__(
        self,
        redis: Redis,
        channels: list[AppriseChannel],
        metrics: Metrics,
        settings: Settings,
        consumer: str | None = None,
    ):
        self.store = NotifyStore(redis, settings.notify_gather, settings.notify_retry_backoff)
        self.channels = channels
        self.policy_channels = tuple(c.channel for c in channels)
        self.periods = {c.name: c.channel.digest for c in channels}
        self.metrics = metrics
        self.console_url = settings.console_url
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.stop = threading.Event()
        self._reclaimed_at = 0.0
        self.threads: list[threading.Thread] = []

    # --- reading the trail ---------------------------------------------------------------------------
    def read_once(self, block_ms: int = 1000) -> int:
        """File what the trail has for this notifier (entries a dead one left first); how many."""
        entries: list[Entry] = []
        if time.monotonic() - self._reclaimed_at >= RECLAIM_EVERY:
            self._reclaimed_at = time.monotonic()
            entries += self.store.reclaim(self.consumer)
        entries += self.store.read(self.consumer, block_ms=block_ms)
        unheard = [entry.id for entry in entries if not self._file_or_skip(entry)]
        self.store.ack(unheard)  # what no channel hears of: acknowledged together, one round trip
        return len(entries)

    def _file_or_skip(self, entry: Entry) -> bool:
        """`file`, for one entry of a trail anything with Redis's password may write to: an entry it
        cannot read is logged (its id, never its text), counted and skipped (False: acknowledged
        with the unheard), and the entries after it are filed as ever. Redis's own errors are not
        the entry's: they go up, and the entry is read again."""
        if entry.lossy:  # told all the same, as read; but someone wrote the trail who is not jobttl
            self.metrics.notify_bad_entries.labels("read").inc()
            logs.record(
                log,
                "notify-bad-entry",
                level=logging.WARNING,
                entry=entry.id,
                stage="read",
                detail="bytes that are not UTF-8, read as U+FFFD: the audit trail has a writer that is not jobttl",
            )
        try:
            return self.file(entry)
        except (RedisError, OSError):
            raise
        except Exception as exc:  # noqa: BLE001 - one bad entry must not end every notification
            self.metrics.notify_bad_entries.labels("read").inc()
            logs.record(
                log, "notify-bad-entry", level=logging.ERROR, entry=entry.id, stage="read", detail=shapes.describe(exc)
            )
            return False

    def file(self, entry: Entry) -> bool:
        """File one entry into the digests of the channels that hear of it; False when none does
        (the caller acknowledges it)."""
        routed = route(entry.fields, self.policy_channels)
        for name in routed.refused:
            self.metrics.notifications.labels(name, routed.event, "refused").inc()
            logs.record(
                log,
                "notification-refused",
                _ref(entry.fields),
                logging.WARNING,
                channel=name,
                notification=routed.event,
                detail="the job's jobttl.io/notify names a channel that does not "
                "take its owner's messages (not in the policy's notify, without owners: true, or not "
                "covering its namespace): nothing is sent for it",
            )
        once = self._once(routed, entry.fields)
        deliveries = routed.deliveries if once is None or not self.store.told(once) else ()
        if not deliveries:
            return False
        self.store.file(entry.id, deliveries, routed.item, time.time(), self.periods, once)
        return True

    @staticmethod
    def _once(routed: Routed, fields: dict[str, str]) -> str | None:
        held_id = fields.get("heldId")
        return f"{routed.event}:{held_id}" if routed.event in ONCE_EVENTS and held_id else None

    def prepare(self) -> None:
        """The consumer group (made at the trail's end by the first notifier), and old consumers gone."""
        self.store.join()
        self.store.forget_idle_consumers()

    def read_forever(self) -> None:
        while not self.stop.is_set():
            try:
                self.read_once()
            except ResponseError as exc:
                if "NOGROUP" in str(exc):  # the trail was deleted (a FLUSHALL): from its new end
                    self.store.join()
                    continue
                self._pause("notify-read-error", exc)
            except (RedisError, OSError) as exc:
                self._pause("notify-read-error", exc)
            except Exception as exc:  # noqa: BLE001 - a bug of ours: logged, and the thread goes on
                self._pause("notify-read-error", exc, level=logging.ERROR)

    # --- sending -------------------------------------------------------------------------------------
    def send_due(self, channel: AppriseChannel) -> int:
        """Send this channel's digests that are due; how many were tried."""
        tried = 0
        now = time.time()
        for group in self.store.due_groups(channel.name, now):
            batch = self.store.take(channel.name, group, channel.channel.digest, now)
            if batch is not None:
                self.send(channel, batch)
                tried += 1
        return tried

    def send(self, channel: AppriseChannel, batch: Batch) -> None:
        try:
            if not batch.items:
                raise ValueError(f"the digest's buffer holds nothing jobttl wrote ({batch.listed} unreadable)")
            message = digest.render(batch.group, batch.items, batch.total, self.console_url)
        except Exception as exc:  # noqa: BLE001 - what the buffer held must not end the channel's thread
            # The group's buffer as it stands cannot be told: it is settled (dropped), counted, logged,
            # and the channel goes on with what comes next.
            self.store.sent(batch, time.time())
            self.metrics.notify_bad_entries.labels("send").inc()
            logs.record(
                log,
                "notify-bad-entry",
                level=logging.ERROR,
                channel=channel.name,
                group=batch.group,
                stage="send",
                entries=batch.total,
                detail=shapes.describe(exc),
            )
            return
        started = time.monotonic()
        error = channel.send(message)
        took = round(time.monotonic() - started, 3)
        if error is None:
            self.store.sent(batch, time.time())
            self._count(channel.name, message, "sent")
            logs.record(
                log,
                "notification-sent",
                channel=channel.name,
                group=batch.group,
                events=list(message.events),
                entries=batch.total,
                seconds=took,
                title=message.title,
            )
            return
        attempts, dropped = self.store.failed(batch, time.time())
        self._count(channel.name, message, "dropped" if dropped else "failed")
        logs.record(
            log,
            "notification-dropped" if dropped else "notification-failed",
            level=logging.ERROR if dropped else logging.WARNING,
            channel=channel.name,
            group=batch.group,
            events=list(message.events),
            entries=batch.total,
            attempts=attempts,
            seconds=took,
            detail=error,
        )

    def _count(self, channel: str, message: digest.Message, outcome: str) -> None:
        for event in message.events:
            self.metrics.notifications.labels(channel, event, outcome).inc()

    def send_forever(self, channel: AppriseChannel) -> None:
        while not self.stop.wait(POLL):
            try:
                self.send_due(channel)
            except (RedisError, OSError) as exc:
                self._pause("notify-send-error", exc, channel=channel.name)
            except Exception as exc:  # noqa: BLE001 - a bug of ours: logged, and the thread goes on
                self._pause("notify-send-error", exc, level=logging.ERROR, channel=channel.name)

    def _pause(self, event: str, exc: Exception, level: int = logging.WARNING, **fields) -> None:
        logs.record(log, event, level=level, detail=shapes.describe(exc), **fields)
        self.stop.wait(PAUSE)

    # --- the process ---------------------------------------------------------------------------------
    def start(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self.read_forever, name="notify-read", daemon=True)]
        threads += [
            threading.Thread(target=self.send_forever, args=(c,), name=f"notify-{c.name}", daemon=True)
            for c in self.channels
        ]
        for thread in threads:
            thread.start()
        self.threads = threads
        return threads

    def dead_threads(self) -> list[str]:
        """The worker threads that have ended while the notifier runs (none should, ever): /healthz
        and /readyz fail, so that Kubernetes restarts the pod rather than leave it silent."""
        if self.stop.is_set():
            return []
        return [thread.name for thread in self.threads if not thread.is_alive()]


def _prepared(notifier: Notifier) -> bool:
    """Join the trail's consumer group, waiting for a Redis that does not answer yet (as the worker
    does); False when stopped first."""
    while not notifier.stop.is_set():
        try:
            notifier.prepare()
            return True
        except (RedisError, OSError) as exc:
            logs.record(log, "notify-redis-unavailable", level=logging.WARNING, detail=str(exc))
            notifier.stop.wait(2 * PAUSE)
    return False


def _ref(fields: dict[str, str]) -> dict[str, str] | None:
    keys = ("apiVersion", "kind", "namespace", "name", "uid")
    return {k: fields[k] for k in keys if k in fields} or None


def run(settings: Settings, env: Mapping[str, str] | None = None) -> None:
    """`jobttl notify`: until SIGTERM or SIGINT."""
    policy_channels = settings.policy.notify
    if not policy_channels:
        raise ConfigError(
            "JOBTTL_POLICY: the policy has no notify channels: `jobttl notify` has nothing to send "
            "(docs/notifications.md)"
        )
    channels = open_channels(policy_channels, os.environ if env is None else env)
    redis = redisconn.connect(settings.redis_url, redisconn.WORKER, settings.redis_ca_file)
    metrics = Metrics()
    notifier = Notifier(redis, channels, metrics, settings)
    health = (
        serve_health(metrics, settings.notify_metrics_port, notifier.dead_threads)
        if settings.notify_metrics_port
        else None
    )
    previous = {sig: signal.signal(sig, lambda *_: notifier.stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    threads = notifier.start() if _prepared(notifier) else []
    if threads:
        logs.record(log, "notify-start", channels=[c.name for c in channels], consumer=notifier.consumer)
    try:
        notifier.stop.wait()
    finally:
        for thread in threads:
            thread.join(timeout=10)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if health is not None:
            health.shutdown()
        logs.record(log, "notify-stop", consumer=notifier.consumer)


def serve_health(metrics: Metrics, port: int, dead: Callable[[], list[str]] = list) -> ThreadingHTTPServer:
    """/metrics, and /healthz and /readyz on `port`: 503 naming the threads `dead` says have ended."""

    def answer(path: str) -> probes.Answer:
        if path.startswith("/metrics"):
            return probes.metrics(metrics.registry)
        if path.startswith(("/healthz", "/readyz")):
            ended = dead()
            return (
                probes.Answer(503, jsoncodec.dumps({"status": "thread ended", "threads": ended}))
                if ended
                else probes.OK
            )
        return probes.NOT_FOUND

    return probes.serve(answer, port, "notify-health")
