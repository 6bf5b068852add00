"""Human durations (``90s``, ``36h``, ``7d``, ``1h30m``) for policy files and annotations."""

from __future__ import annotations

import re

from jobttl.core.domain.wire.identity import shown

# The longest TTL jobttl schedules: past this a due time is no longer a date anything can represent;
# "never" is jobttl.io/keep.
MAX_TTL = 100 * 365 * 86400
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+)([smhdw])")
# What `parse_duration` accepts, in words: its errors say it, and so does the InvalidTTL Event.
FORMS = "90s, 36h, 7d, 2w, 1h30m (whole numbers with s, m, h, d or w, no spaces) or plain seconds (3600)"


def parse_duration(text: str) -> int:
    """Seconds in `text`; a bare integer counts as seconds. Raises ValueError naming the problem."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise ValueError(f"expected a duration such as {FORMS}, got {shown(text)}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"a duration cannot be negative, got {text}")
        return text
    value = text.strip()
    if value.isdigit():
        return int(value)
    parts = _PART.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise ValueError(f"expected a duration such as {FORMS}, got {shown(text)}")
    return sum(int(n) * UNITS[u] for n, u in parts)


def format_duration(seconds: float, exact: bool = False) -> str:
    """For humans, the one way jobttl prints a duration: its largest two units, cut down
    (7195 → 1h59m, 183600 → 2d3h, 90 → 1m30s, 45s, 3630 → 1h); the sign is the caller's.

    `exact` keeps every unit (93784 → 1d2h3m4s), the inverse of parse_duration: a TTL is
    shown as it was configured.
    """
    whole = int(abs(seconds))
    if whole == 0:
        return "0s"
    parts: list[tuple[int, str]] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, whole = divmod(whole, size)
        if parts or count:  # from the largest unit present down
            parts.append((count, unit))
    return "".join(f"{count}{unit}" for count, unit in (parts if exact else parts[:2]) if count)
