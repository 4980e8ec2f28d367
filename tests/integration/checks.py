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
