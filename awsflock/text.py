"""Times and durations as people read them, for messages (no other awsflock module needed)."""

from __future__ import annotations


def format_seconds(seconds: float) -> str:
    """Short human form: '4m12s', '2h', '1d3h', '0.4s'."""
    if seconds < 0:
        return "-" + format_seconds(-seconds)
    if seconds < 10 and seconds != int(seconds):
        return f"{seconds:.1f}s"
    total = round(seconds)
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if total >= size or (unit == "s" and not parts):
            parts.append(f"{total // size}{unit}")
            total %= size
    return "".join(parts[:2])


def iso_utc(epoch: float) -> str:
    """ISO-8601 in UTC to the second, e.g. 2026-11-22T06:10:00Z."""
    import datetime as _dt

    stamp = _dt.datetime.fromtimestamp(epoch, tz=_dt.timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


#: Bidirectional overrides and isolates: they reorder how the rest of a line is shown.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def unsafe(char: str) -> bool:
    """Whether ``char`` changes how a line is shown rather than being shown: a control
    character (a newline, a terminal escape), a line or paragraph separator, a bidi override."""
    import unicodedata

    return unicodedata.category(char) in ("Cc", "Zl", "Zp") or char in _BIDI


def printable(text: str) -> str:
    """``text`` with its ``unsafe`` characters escaped (``\\n``, ``\\x1b``, ``\\u202e``), so
    that a name or an owner written by any client can neither break a line of output in two
    nor send a terminal escape; the rest is left as it is."""
    if not any(unsafe(char) for char in text):
        return text
    return "".join(repr(char)[1:-1] if unsafe(char) else char for char in text)
