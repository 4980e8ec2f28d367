"""Checkers over the holds that workers logged."""

from __future__ import annotations

import json
from pathlib import Path


def holds(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def assert_never_two_holders(log: Path, counter: Path, expected: int) -> list[dict]:
    """No two logged holds overlap, and the guarded counter lost no update."""
    entries = sorted(holds(log), key=lambda h: h["start"])
    assert len(entries) == expected, entries
    for before, after in zip(entries, entries[1:]):
        assert before["end"] <= after["start"], f"two holders at once: {before} and {after}"
    assert int(counter.read_text()) == expected, "a guarded update was lost"
    return entries


def assert_pool_never_over_admitted(log: Path, counter: Path, slots: int, expected: int) -> None:
    """Never more than ``slots`` holders at once, never two on one slot, no lost update."""
    entries = holds(log)
    assert len(entries) == expected, entries
    events = sorted(
        [(h["start"], 1) for h in entries] + [(h["end"], -1) for h in entries],
        key=lambda e: (e[0], e[1]),
    )
    current = peak = 0
    for _, change in events:
        current += change
        peak = max(peak, current)
    assert peak <= slots, f"{peak} holders at once in a pool of {slots}"
    by_slot: dict[int, list[dict]] = {}
    for h in entries:
        assert h["slot"] is not None and 0 <= h["slot"] < slots, h
        by_slot.setdefault(h["slot"], []).append(h)
    total = 0
    for slot, items in by_slot.items():
        items.sort(key=lambda h: h["start"])
        for before, after in zip(items, items[1:]):
            assert before["end"] <= after["start"], f"two holders on slot {slot}"
        total += int(Path(f"{counter}.{slot}").read_text())
    assert total == expected, "a guarded update was lost"
