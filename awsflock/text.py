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
