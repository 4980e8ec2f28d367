"""A contending worker: loops acquire → guarded read-modify-write → release, logging each hold.

Run as ``python worker.py BIN LOCK COUNTER LOG CYCLES [acquire options...]``. It appends one JSON
line per hold to LOG: {"pid", "bin", "start", "end", "token"}. The counter file is updated with
a plain read-modify-write that only mutual exclusion keeps correct. Exit 0 when all cycles ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def main() -> int:
    binary, lock, counter, log, cycles, *options = sys.argv[1:]
    deadline = time.monotonic() + 240  # bounded: never loops forever
    done = 0
    while done < int(cycles) and time.monotonic() < deadline:
        got = subprocess.run([binary, "acquire", lock, *options], capture_output=True, text=True)
        if got.returncode == 3:
            continue
        if got.returncode != 0:
            print(f"acquire failed {got.returncode}: {got.stderr}", file=sys.stderr)
            return 1
        lease = got.stdout.strip().splitlines()[-1]
        slot = None
        if lease.startswith("{"):  # --json: a pool slot
            data = json.loads(lease)
            lease, slot = data["lease_id"], data.get("slot")
        start = time.time()
        # One counter per slot: within a slot, holders must be mutually exclusive.
        path = counter if slot is None else f"{counter}.{slot}"
        try:
            with open(path) as f:
                value = int(f.read() or 0)
        except FileNotFoundError:
            value = 0
        time.sleep(0.2)
        with open(path, "w") as f:
            f.write(str(value + 1))
        end = time.time()
        with open(log, "a") as f:
            entry = {"pid": os.getpid(), "bin": binary, "start": start, "end": end, "slot": slot}
            f.write(json.dumps(entry) + "\n")
        released = subprocess.run([binary, "release", lock, lease], capture_output=True, text=True)
        if released.returncode != 0:
            print(f"release failed {released.returncode}: {released.stderr}", file=sys.stderr)
            return 1
        done += 1
    return 0 if done == int(cycles) else 2


if __name__ == "__main__":
    sys.exit(main())
