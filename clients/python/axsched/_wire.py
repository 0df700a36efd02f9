"""Wire formats shared by the client and the worker: Go durations, RFC 3339
times, Retry-After and callback header values. Internal; the public names
are re-exported from :mod:`axsched` where they are useful to applications.
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from typing import Optional, Union

__all__ = [
    "Duration",
    "duration_to_ns",
    "format_duration",
    "parse_duration",
    "format_time",
    "parse_time",
    "parse_retry_after",
    "decode_header_value",
]

#: A duration given by the caller: a :class:`datetime.timedelta`, or a
#: number of seconds (``int`` or ``float``).
Duration = Union[timedelta, float, int]

_NS_PER_US = 1_000
_NS_PER_MS = 1_000_000
_NS_PER_S = 1_000_000_000

# Go's time.ParseDuration units, in nanoseconds.
_UNITS = {
    "ns": 1,
    "us": _NS_PER_US,
    "\u00b5s": _NS_PER_US,  # micro sign, what Go prints
    "\u03bcs": _NS_PER_US,  # Greek small letter mu
    "ms": _NS_PER_MS,
    "s": _NS_PER_S,
    "m": 60 * _NS_PER_S,
    "h": 3600 * _NS_PER_S,
}
_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def duration_to_ns(value: Duration, field: str = "duration") -> int:
    """Return ``value`` (a timedelta, or seconds as int/float) in whole
    nanoseconds, rounded to the nearest. Raises ``TypeError`` for other types
    (``bool`` included) and ``ValueError`` for NaN or infinity."""
    if isinstance(value, timedelta):
        return ((value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds) * _NS_PER_US
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{field}: want a datetime.timedelta or seconds as a number, got {type(value).__name__}")
    if isinstance(value, int):
        return value * _NS_PER_S
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{field}: want a finite number of seconds, got {value}")
    return int(round(Fraction(value) * _NS_PER_S))


def _fraction(v: int, prec: int) -> str:
    """v / 10**prec with trailing zeros of the fraction dropped, as Go does."""
    whole, frac = divmod(v, 10**prec)
    digits = f"{frac:0{prec}d}".rstrip("0")
    return f"{whole}.{digits}" if digits else str(whole)


def format_duration(value: Duration, field: str = "duration") -> str:
    """Format a duration the way Go's ``time.Duration.String`` does, so the
    sidecar's ``time.ParseDuration`` reads it back exactly: ``1.5`` →
    ``"1.5s"``, ``timedelta(milliseconds=250)`` → ``"250ms"``, ``90`` →
    ``"1m30s"``, ``0`` → ``"0s"``. Floats are rounded to the nanosecond."""
    d = duration_to_ns(value, field)
    if d == 0:
        return "0s"
    u = abs(d)
    if u < _NS_PER_US:
        s = f"{u}ns"
    elif u < _NS_PER_MS:
        s = _fraction(u, 3) + "\u00b5s"
    elif u < _NS_PER_S:
        s = _fraction(u, 6) + "ms"
    else:
        secs, frac = divmod(u, _NS_PER_S)
        s = _fraction(secs % 60 * _NS_PER_S + frac, 9) + "s"
        if secs >= 60:
            s = f"{secs // 60 % 60}m" + s
        if secs >= 3600:
            s = f"{secs // 3600}h" + s
    return "-" + s if d < 0 else s


def parse_duration(text: str) -> timedelta:
    """Parse a Go duration string (``"30s"``, ``"1h2m3.5s"``, ``"250ms"``)
    into a :class:`datetime.timedelta`, truncated to the microsecond. Raises
    ``ValueError`` for anything ``time.ParseDuration`` would refuse."""
    s = text
    neg = False
    if s[:1] in ("-", "+"):
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return timedelta(0)
    if not s:
        raise ValueError(f"invalid Go duration {text!r}")
    total = Fraction(0)
    pos = 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if not m or m.group(1) in ("", "."):
            raise ValueError(f"invalid Go duration {text!r}")
        total += Fraction(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    us = int(total) // _NS_PER_US  # total >= 0: truncates toward zero
    return timedelta(microseconds=-us if neg else us)


def format_time(value: datetime, field: str = "time") -> str:
    """Format an aware datetime as RFC 3339 in UTC with microseconds when
    there are any (``"2026-01-02T15:04:05.25Z"``). Naive datetimes are
    refused with ``ValueError``: their time zone is a guess."""
    if not isinstance(value, datetime):
        raise TypeError(f"{field}: want a datetime.datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValueError(
            f"{field}: naive datetime {value.isoformat()!r}; give a time zone, "
            "e.g. datetime.now(timezone.utc) + timedelta(minutes=30)"
        )
    u = value.astimezone(timezone.utc)
    s = u.strftime("%Y-%m-%dT%H:%M:%S")
    if u.microsecond:
        s += "." + f"{u.microsecond:06d}".rstrip("0")
    return s + "Z"


_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)


def parse_time(text: str) -> datetime:
    """Parse an RFC 3339 time as the sidecar writes it (``"2026-01-02T15:04:05.123Z"``,
    any number of fractional digits, ``Z`` or an offset) into an aware
    datetime in UTC, truncated to the microsecond. Works on Python 3.9,
    whose ``datetime.fromisoformat`` does not accept ``Z``."""
    m = _RFC3339.fullmatch(text)
    if not m:
        raise ValueError(f"invalid RFC 3339 time {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    micro = int((m.group(7) or "").ljust(6, "0")[:6])
    tz = timezone.utc
    if m.group(9):
        off = timedelta(hours=int(m.group(10)), minutes=int(m.group(11)))
        tz = timezone(-off if m.group(9) == "-" else off)
    if second == 60:  # a leap second, as RFC 3339 allows
        second = 59
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=tz).astimezone(timezone.utc)


def parse_retry_after(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Read a Retry-After header: delay seconds, or an HTTP date. Returns
    seconds (>= 0) or ``None`` when the header is absent or malformed."""
    if value is None:
        return None
    v = value.strip()
    if not v:
        return None
    if v.isdigit():
        return float(int(v))
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    delta = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, delta)


def decode_header_value(value: Optional[str]) -> Optional[str]:
    """Undo http.server's latin-1 decoding of a header value: the sidecar
    sends task ids as raw UTF-8 bytes. Values that are not valid UTF-8 are
    returned as decoded (latin-1)."""
    if value is None:
        return None
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value
