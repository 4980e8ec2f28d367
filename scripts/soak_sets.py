"""Soak of several locks taken together (``awsflock.sets``): two processes loop, one taking
[a, b] and the other [b, a], each holding both for a moment and writing to a fenced counter per
name. Taken one by one, such a pair deadlocks; taken as a set it must never: every acquire ends
within its wait, no two holders overlap, and each name's tokens only go up.

    .venv/bin/python scripts/soak_sets.py --store redis://127.0.0.1:6379/0 --rounds 10000
    .venv/bin/python scripts/soak_sets.py --store postgresql://app@db/ops --rounds 1000

The store must exist (``awsflock table-create --store URL``). Prints one JSON line: rounds
done, overlaps, token regressions, timeouts, seconds, and the rounds per second. Exits 1 on any
violation. It runs against the URL it is given; it starts no server.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
import uuid
from pathlib import Path


def _worker(url: str, order: list[str], rounds: int, journal: str, wait: float) -> None:
    import awsflock
    from awsflock import errors

    table = awsflock.connect(url)
    with open(journal, "a", buffering=1) as out:
        for _ in range(rounds):
            try:
                with table.lock(order, lease=30, wait=wait) as held:
                    tokens = held.fencing_tokens
                    out.write(f"start {os.getpid()} {time.monotonic()} {json.dumps(tokens)}\n")
                    time.sleep(0.001)
                    out.write(f"end {os.getpid()} {time.monotonic()}\n")
            except errors.LockBusy:
                out.write(f"timeout {os.getpid()} {time.monotonic()}\n")
    table.close()


def _check(journal: Path) -> dict[str, float]:
    """Overlaps (a start while another holder's last start has no end), token regressions per
    name, timeouts, and rounds done, from the journal's lines in time order."""
    events = []
    for line in journal.read_text().splitlines():
        kind, pid, at, *rest = line.split(" ", 3)
        events.append((float(at), kind, pid, rest[0] if rest else ""))
    events.sort()
    holder: str | None = None
    last: dict[str, int] = {}
    found: dict[str, float] = {"rounds": 0, "overlaps": 0, "regressions": 0, "timeouts": 0}
    for _, kind, pid, data in events:
        if kind == "timeout":
            found["timeouts"] += 1
        elif kind == "start":
            found["rounds"] += 1
            found["overlaps"] += holder is not None
            holder = pid
            for name, token in json.loads(data).items():
                found["regressions"] += token <= last.get(name, 0)
                last[name] = token
        elif holder == pid:
            holder = None
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="the store URL (as --store takes it)")
    parser.add_argument("--rounds", type=int, default=10_000, help="per process")
    parser.add_argument("--wait", type=float, default=120.0, help="each acquire's wait (s)")
    args = parser.parse_args(argv)
    tag = uuid.uuid4().hex[:8]
    a, b = f"soak-{tag}-a", f"soak-{tag}-b"
    journal = Path(f"/tmp/awsflock-soak-sets-{tag}.log")
    started = time.monotonic()
    procs = [
        multiprocessing.Process(
            target=_worker, args=(args.store, order, args.rounds, str(journal), args.wait)
        )
        for order in ([a, b], [b, a])
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    seconds = time.monotonic() - started
    found = _check(journal)
    found.update(seconds=round(seconds, 1), per_second=round(found["rounds"] / seconds, 1))
    print(json.dumps(found, sort_keys=True))
    bad = found["overlaps"] or found["regressions"] or found["timeouts"]
    return 1 if bad or any(p.exitcode for p in procs) else 0


if __name__ == "__main__":
    sys.exit(main())
