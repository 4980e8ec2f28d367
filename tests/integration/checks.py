"""Checkers over the holds that workers logged."""

from __future__ import annotations

import json
import subprocess
import sys
import time
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


WORKER = Path(__file__).with_name("worker.py")


def run_workers(
    binary: Path,
    env: dict[str, str],
    lock: str,
    counter: Path,
    log: Path,
    processes: int,
    cycles: int,
    *options: str,
) -> None:
    """Start ``processes`` contending workers (worker.py) and wait for all; each must exit 0."""
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                str(binary),
                lock,
                str(counter),
                str(log),
                str(cycles),
                *options,
            ],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    for worker in workers:
        _, err = worker.communicate(timeout=250)
        assert worker.returncode == 0, err


def wait_for(path: Path, timeout: float = 20.0, empty_ok: bool = False) -> str:
    """Bounded wait until ``path`` exists (with content unless ``empty_ok``): a command under
    test signalling that it has started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and (empty_ok or path.read_text().strip()):
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")
