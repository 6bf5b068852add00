"""Human durations (``90s``, ``36h``, ``7d``, ``1h30m``) for policy files and annotations."""

from __future__ import annotations

import re

from jobttl.core.identity import shown

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


def format_duration(seconds: int) -> str:
    """The inverse, for humans: 93784 → 1d2h3m4s."""
    if seconds == 0:
        return "0s"
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            out.append(f"{count}{unit}")
    return "".join(out)
