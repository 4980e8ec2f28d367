"""What the GitHub Action reads of awsflock's output is what awsflock writes.

action/src/output.js declares the names the Action reads: the events of the JSON log lines on
stderr with their fields, and the fields of `acquire --json` and `status --json`. Its JSDoc
typedefs are all the Action's code may read (tsc, strict, checks that in scripts/test). Here:
the typedefs name exactly what the table declares, and awsflock, run in-process on the
in-memory store in fake time, writes every name and field in the table. A field renamed on
either side, or an event the CLI stops writing, fails here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from awsflock.cli import cli
from awsflock.cli.options import Common
from awsflock.lock.lease import LockTable
from awsflock.records import Identity, Waiter
from awsflock.stores.memory import MemoryStore
from tests.helpers import ScheduledClock

ROOT = Path(__file__).resolve().parents[1]
OUTPUT_JS = ROOT / "action" / "src" / "output.js"
ALICE = Identity(owner="alice", host="build-7", pid=41, ci_url="https://ci.example/runs/9")
#: awsflock's process (and the runner's worker it keeps the lease for) in line.
WAITER = Identity(owner="ci", host="runner-3", pid=4242, ci_url="https://ci.example/runs/10")


def declared(source: Path = OUTPUT_JS) -> dict[str, Any]:
    """The table output.js exports (its lists; functions left out), read by node."""
    if shutil.which("node") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must check the action's reads: node is needed (apt-get install nodejs)")
        pytest.skip("needs node (the action's table is JavaScript)")
    script = f"JSON.stringify(require({str(source)!r}))"
    done = subprocess.run(["node", "-p", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    table: dict[str, Any] = json.loads(done.stdout)
    return table


def typedefs(text: str) -> dict[str, set[str]]:
    """The properties of each ``@typedef {object} Name`` in a JavaScript source."""
    found = {}
    for block in re.findall(r"/\*\*(.*?)\*/", text, re.S):
        name = re.search(r"@typedef \{object\} (\w+)", block)
        if name:
            found[name.group(1)] = set(re.findall(r"@property \{[^}]*\} \[?(\w+)", block))
    return found


class Ticking(ScheduledClock):
    """Fake time that a wait on an event moves forward, as a sleep does."""

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if not event.is_set():
            self.sleep(seconds)
        return event.is_set()


@dataclass
class World:
    clock: Ticking
    store: MemoryStore

    def table(self, who: Identity) -> LockTable:
        return LockTable(store=self.store, identity=who)

    def run(self, *args: str) -> Result:
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)

    def events(self, *args: str) -> list[dict[str, Any]]:
        """The JSON log lines of an awsflock command."""
        result = self.run(*args, "--log-format", "json")
        return [json.loads(line) for line in result.stderr.splitlines()]

    def join(self, lock: str, who: Identity) -> None:
        """``who`` in line for ``lock``, as its join would leave it."""
        now = round(self.clock.time() * 1000)
        assert self.store.join(lock, Waiter("0" * 16, 0, who, now - 5000, now)).applied


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> World:
    clock = Ticking()
    world = World(clock, MemoryStore(clock=clock))

    def table(self: Common, owner: str | None = None) -> LockTable:
        return world.table(Identity(owner=owner or "ci", host="runner-3", pid=4242))

    monkeypatch.setattr(Common, "table", table)
    return world


def test_the_action_reads_only_what_its_table_declares():
    table = declared()
    types = typedefs(OUTPUT_JS.read_text())
    event_fields = set(table["EVERY_EVENT"]).union(*table["EVENTS"].values())
    assert types["AwsflockEvent"] == event_fields
    assert types["Lease"] == set(table["LEASE"])
    assert types["Status"] == set(table["STATUS"] + table["POOL"] + table["SLOT"])
    assert types["Waiter"] == set(table["WAITER"])
    # The event names the code may compare with are the table's (tsc checks each comparison).
    text = OUTPUT_JS.read_text()
    assert "@typedef {keyof typeof EVENTS} EventName" in text
    assert "@property {EventName} event" in text


def test_awsflock_writes_every_event_the_action_tells_apart_with_its_fields(world):
    table = declared()
    lease = world.table(ALICE).acquire("deploy", lease=600, wait=0)
    world.clock.at(world.clock.time() + 20, lease.release)
    said = world.events("acquire", "deploy", "--json", "--wait-time", "1m")
    world.table(ALICE).acquire("held", lease=600, wait=0)
    said += world.events("acquire", "held", "--wait-time", "1m")  # runs out: busy
    said += world.events("release", "deploy", "0" * 36)
    for event in said:
        assert set(table["EVERY_EVENT"]) <= event.keys(), event
    seen = {event["event"]: event for event in said}
    for name, fields in table["EVENTS"].items():
        assert name in seen, f"awsflock wrote no {name!r} event: {sorted(seen)}"
        assert set(fields) <= seen[name].keys(), seen[name]
    assert set(table["LEVELS"]) <= {event["level"] for event in said}
    # The action says a busy lock in its own error line, not as a warning of its own.
    assert seen["busy"]["level"] == "warning"


def test_the_lease_acquire_prints_has_every_field_the_action_reads(world):
    table = declared()
    plain = json.loads(world.run("acquire", "deploy", "--json").stdout)
    pooled = json.loads(world.run("acquire", "gpus", "--slots", "2", "--json").stdout)
    several = json.loads(world.run("acquire", "network", "db", "--json").stdout)
    assert set(table["LEASE"]) - {"slot", "fencing_tokens"} <= plain.keys()
    assert "slot" not in plain  # a plain lock's lease has no slot: the action says none
    assert set(table["LEASE"]) - {"fencing_tokens"} <= pooled.keys()
    # Several locks' lease has each one's token (the action reads it), and no single one.
    assert {"lease_id", "fencing_tokens"} <= several.keys() and "fencing_token" not in several
    assert set(several["fencing_tokens"]) == {"network", "db"}
    # How the lease before ended: one's, or each lock's of several by name (the job summary).
    assert plain["previous"]["how"] == "first" and set(several["previous"]) == {"network", "db"}


def test_status_has_every_field_the_action_reads(world):
    table = declared()
    world.table(ALICE).acquire("deploy", lease=60, wait=0)
    world.join("deploy", WAITER)
    held = json.loads(world.run("status", "deploy", "--json").stdout)
    assert set(table["STATUS"]) - {"reclaimable_in_s"} <= held.keys()
    assert all(set(table["WAITER"]) <= waiter.keys() for waiter in held["line"])
    assert held["line"][0]["pid"] == WAITER.pid  # how the action finds its place in line
    world.clock.advance(61)
    expired = json.loads(world.run("status", "deploy", "--json").stdout)
    assert expired["state"] == "expired" and "reclaimable_in_s" in expired
    world.table(ALICE).acquire("gpus", lease=60, wait=0, slots=2)
    pool = json.loads(world.run("status", "gpus", "--json").stdout)
    assert set(table["POOL"]) <= pool.keys()
    slot = next(s for s in pool["slot_states"] if s["state"] == "held")
    assert set(table["SLOT"] + table["STATUS"]) - {"reclaimable_in_s", "line"} <= slot.keys()
