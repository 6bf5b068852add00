"""The policy's channels as Apprise sends to them: the one module that imports Apprise.

Each channel is checked when the notifier starts: its URL resolved (``urlFromEnv``: the variable
must be set), Apprise must take it, and a URL written in the policy itself must hold nothing
Apprise would hide (a token, a password): a secret never sits in the ConfigMap. What Apprise says
of a failure is kept, without the URL's secret parts (`jobttl.core.domain.notices.notify.redacted`), and
Apprise's own log lines, which may quote a URL, stay out of jobttl's logs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import apprise

from jobttl.core.domain.wire import shapes
from jobttl.core.domain.notices.digest import Message
from jobttl.core.domain.notices.notify import Channel, redacted, resolve
from jobttl.core.runtime.config import ConfigError


class _ThreadCapture(logging.Handler):
    """Apprise's warnings, kept per thread: each channel sends from its own thread, and one channel's
    error must never be reported (nor leak a secret) as another's."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.local = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        lines = getattr(self.local, "lines", None)
        if lines is not None:
            lines.append(record.getMessage())

    def start(self) -> None:
        self.local.lines = []

    def stop(self) -> list[str]:
        lines, self.local.lines = getattr(self.local, "lines", None) or [], None
        return lines


_CAPTURE = _ThreadCapture()
_APPRISE_LOG = logging.getLogger("apprise")
_APPRISE_LOG.addHandler(_CAPTURE)
_APPRISE_LOG.propagate = False  # Apprise logs URLs at DEBUG and INFO: never into jobttl's logs
_APPRISE_LOG.setLevel(logging.WARNING)


class AppriseChannel:
    """One channel, ready to send."""

    def __init__(self, channel: Channel, url: str, plugin: Any = None):
        self.channel = channel
        self.url = url
        # The plugin itself, not an Apprise object: Apprise.notify sends from a thread pool of its own,
        # where neither this channel's thread nor its log capture would see what went wrong.
        self.plugin = plugin if plugin is not None else apprise.Apprise.instantiate(url)

    @property
    def name(self) -> str:
        return self.channel.name

    @classmethod
    def open(cls, channel: Channel, env: Mapping[str, str]) -> AppriseChannel:
        """The channel, checked: a ConfigError names the policy's file and field."""
        try:
            url = resolve(channel, dict(env))
        except ValueError as exc:
            raise ConfigError(f"JOBTTL_POLICY: {exc}") from None
        plugin = apprise.Apprise.instantiate(url)
        scheme = url.partition("://")[0]
        if plugin is None:
            raise ConfigError(
                f"JOBTTL_POLICY: {channel.place}: Apprise takes no such URL ({scheme}://...: an unknown "
                "scheme, or a part it needs is missing; see https://github.com/caronc/apprise/wiki)"
            )
        if channel.url is not None and plugin.url(privacy=True) != plugin.url():
            raise ConfigError(
                f"JOBTTL_POLICY: {channel.place}: this URL holds a secret (Apprise hides part of it: "
                f"{plugin.url(privacy=True)}): put it in a Secret and name its variable with urlFromEnv"
            )
        return cls(channel, url, plugin)

    def send(self, message: Message) -> str | None:
        """Send one message; None when it went, else why not (without the URL's secrets)."""
        _CAPTURE.start()
        try:
            sent = self.plugin.notify(
                body=message.body,
                title=message.title,
                notify_type=apprise.NotifyType.WARNING if message.warning else apprise.NotifyType.INFO,
                body_format=apprise.NotifyFormat.TEXT,
            )
        except Exception as exc:  # noqa: BLE001 - a plugin's bug is this channel's failure, not the notifier's
            return redacted(" ".join([shapes.describe(exc), *_CAPTURE.stop()]), self.url)
        lines = _CAPTURE.stop()
        if sent:
            return None
        return redacted(" ".join(lines) or "Apprise reported a failure and said nothing more", self.url)


def open_channels(channels: tuple[Channel, ...], env: Mapping[str, str]) -> list[AppriseChannel]:
    return [AppriseChannel.open(channel, env) for channel in channels]
