"""Chaos: K processes contend for a lock and a 2-slot pool through a faulty network while
holders are SIGKILLed and SIGSTOPped past their lease; a checker proves the lock's promises.

Each contender loops ``awsflock run`` (real processes, JSON logs) around ``critical.py``, whose
critical section does fenced writes to a shared record and a read-modify-write of a counter.
The fault proxy between the contenders and the server drops answers after the request went
through, resets connections, adds latency and answers bursts of throttling errors.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.faultproxy import FaultProxy
from tests.servers import (
    NO_AWS_FILES,
    SERVERS,
    PostgresServer,
    RedisServer,
    Server,
    local_client,
)

BIN = Path(sys.executable).parent / "awsflock"
CRITICAL = Path(__file__).with_name("critical.py")
LEASE, SKEW = 3.0, 1.0
#: What an `awsflock run` here may exit with (SPEC §3): the critical section's own 0 or 3
#: (stale), 75 not acquired, 124 lease lost, 125 awsflock failed (e.g. endpoint unreachable
#: after retries), -9 killed by this harness.
ALLOWED_EXITS = {0, 3, 75, 124, 125, -signal.SIGKILL}


#: The errors of a call that got no answer (what it found is unknown), by class name.
NO_ANSWER = {"EndpointUnreachable", "Throttled"}

#: An acquire never reports a lease with less than this fraction of it left (awsflock's rule).
MIN_LEFT = 0.5


@dataclass
class Invocation:
    target: str
    slots: int | None
    log: Path
    code: int | None = None
    killed: bool = False
    paused: bool = False
    pid: int | None = None


@dataclass
class Outcome:
    summary: dict[str, Any]
    violations: list[str] = field(default_factory=list)

    def screen(self) -> str:
        s = self.summary
        lines = [
            f"chaos on {s['server']}: {s['workers']} processes, {s['duration_s']:.0f}s, "
            f"seed {s['seed']}",
            f"  runs: {s['runs']} (exit codes {dict(sorted(s['exit_codes'].items()))})",
            f"  leases granted: {s['grants']}, fenced writes accepted: {s['writes_accepted']}, "
            f"refused as stale: {s['writes_refused']}",
            f"  requests through the proxy: {s['requests']}",
            f"  faults injected: {dict(sorted(s['faults'].items()))}",
            f"  holders SIGKILLed: {s['kills']}, SIGSTOPped past their lease: {s['pauses']}, "
            f"force-released: {s.get('forced', 0)}",
            f"  violations: {len(self.violations)}",
        ]
        lines += [f"    - {v}" for v in self.violations[:20]]
        return "\n".join(lines)


#: The request (by number through the proxy) that gets each kind of fault once in every run.
_EACH_ONCE = {10: "drop", 15: "reset", 20: "delay"}


def fault_plan(rng: random.Random, rate: float) -> Any:
    burst = {"left": 0}
    calls = {"n": 0}
    lock = threading.Lock()

    def plan(target: str, n: int) -> str:
        with lock:
            calls["n"] += 1
            # One fault of each kind in every run, however few requests a slow machine makes
            # (the test asserts each kind happened: at 4%, a run of 126 requests drew no drop
            # about one time in 60); the rest at random.
            first = _EACH_ONCE.get(calls["n"])
            if first is not None:
                return f"delay:{rng.uniform(0.1, 0.8):.2f}" if first == "delay" else first
            if calls["n"] == 25:
                burst["left"] = 2
                return "throttle"
            if burst["left"]:
                burst["left"] -= 1
                return "throttle"
            r = rng.random() / rate
            if r < 0.04:
                return "drop"
            if r < 0.07:
                return "reset"
            if r < 0.12:
                return f"delay:{rng.uniform(0.1, 0.8):.2f}"
            if r < 0.14:
                burst["left"] = 2
                return rng.choice(["throttle", "busy"])
            return "pass"

    return plan


class DynamoDBSide:
    """The lock table and the fenced record on a DynamoDB-compatible server."""

    skew = ("--skew", f"{SKEW:g}s")
    skew_s = SKEW

    def __init__(self, server_url: str, server_port: int, locks_table: str, app_table: str):
        self.url, self.port = server_url, server_port
        self.locks_table, self.app_table = locks_table, app_table
        self.client = local_client(server_url)

    def env(self, url: str | None = None) -> dict[str, str]:
        return {"AWSFLOCK_ENDPOINT_URL": url or self.url, "AWSFLOCK_TABLE": self.locks_table}

    def create_app_table(self) -> None:
        self.client.create_table(
            TableName=self.app_table,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        _wait_active(self.client, self.app_table)

    def proxy(self, plan: Any) -> FaultProxy:
        return FaultProxy(("127.0.0.1", self.port), plan)

    def proxied_env(self, proxy: FaultProxy) -> dict[str, str]:
        return self.env(proxy.url)

    def counter(self, key: str) -> int:
        item = self.client.get_item(
            TableName=self.app_table, Key={"pk": {"S": key}}, ConsistentRead=True
        ).get("Item", {})
        return int(item.get("counter", {}).get("N", "0"))

    def held_now(self) -> list[dict[str, Any]]:
        return _held_now(self.client, self.locks_table)


class UrlSide:
    """A store named by URL (AWSFLOCK_STORE), timed by its server's clock: no --skew."""

    skew: tuple[str, ...] = ()
    skew_s = 0.0

    def __init__(self, url: str, port: int, locks_table: str, app_table: str):
        self.url, self.port = url, port
        self.locks_table, self.app_table = locks_table, app_table

    def env(self, url: str | None = None) -> dict[str, str]:
        return {"AWSFLOCK_STORE": url or self.url, "AWSFLOCK_TABLE": self.locks_table}

    def proxied_env(self, proxy: FaultProxy) -> dict[str, str]:
        return self.env(proxy.url_for(self.url))


class PostgresSide(UrlSide):
    """The lock table and the fenced record on a PostgreSQL server; the proxy speaks its wire
    protocol (its "throttle" is a serialization failure, SQLSTATE 40001, that awsflock
    retries). No skew window on this store, so no --skew."""

    def _sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(statement, params or None)
            return cur.fetchall() if cur.description else []

    def create_app_table(self) -> None:
        self._sql(
            f'CREATE TABLE "{self.app_table}" (pk text PRIMARY KEY, fence bigint NOT NULL,'
            " counter bigint NOT NULL DEFAULT 0)"
        )

    def proxy(self, plan: Any) -> FaultProxy:
        from tests.pgproxy import PgFaultProxy

        return PgFaultProxy(("127.0.0.1", self.port), plan)

    def counter(self, key: str) -> int:
        rows = self._sql(f'SELECT counter FROM "{self.app_table}" WHERE pk = %s', key)
        return int(rows[0][0]) if rows else 0

    def held_now(self) -> list[dict[str, Any]]:
        """Leases that still run by the server's clock, with the pid that holds them."""
        rows = self._sql(
            f"SELECT lock_id, slot, (who->>'pid')::int FROM \"{self.locks_table}\""
            " WHERE lock_id IN ('chaos-lock', 'chaos-pool') AND lease_id IS NOT NULL"
            " AND ended = '' AND expires_ms > extract(epoch FROM clock_timestamp()) * 1000"
            " AND NOT (slot = -1 AND slots IS NOT NULL)"
        )
        return [
            {"lock": lock, "slot": None if slot < 0 else slot, "pid": pid}
            for lock, slot, pid in rows
        ]


class RedisSide(UrlSide):
    """The locks and the fenced record on a Redis server (the locks under the prefix
    ``locks_table``, the record under ``app_table``); the proxy speaks its protocol (its
    "throttle" and "busy" are BUSY, which awsflock retries). No skew window, so no --skew."""

    def _client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url)

    def create_app_table(self) -> None:
        """Nothing to create: the record's hash is made by its first write."""

    def proxy(self, plan: Any) -> FaultProxy:
        from tests.redisproxy import RedisFaultProxy

        return RedisFaultProxy(("127.0.0.1", self.port), plan)

    def counter(self, key: str) -> int:
        client = self._client()
        try:
            return int(client.hget(f"{self.app_table}:{key}", "counter") or 0)
        finally:
            client.close()

    def held_now(self) -> list[dict[str, Any]]:
        """Leases that still run by the server's clock, with the pid that holds them."""
        from awsflock.stores.redis import layout

        client = self._client()
        try:
            seconds, micros = client.time()
            now_ms = seconds * 1000 + micros // 1000
            held = []
            for lock in ("chaos-lock", "chaos-pool"):
                fields = client.hgetall(layout.lock_key(self.locks_table, lock))
                fields = {k.decode(): v.decode() for k, v in fields.items()}
                for name, value in fields.items():
                    if name != "p" and not name.startswith("s:"):
                        continue
                    if name == "p" and "slots" in fields:
                        continue  # a pool's hash keeps its plain lock's last lease
                    lease = json.loads(value)
                    if lease.get("ended") == "" and int(lease["exp"]) > now_ms:
                        pid = json.loads(lease.get("who") or "{}").get("pid")
                        slot = None if name == "p" else int(name[2:])
                        held.append({"lock": lock, "slot": slot, "pid": pid})
            return held
        finally:
            client.close()


#: The servers a chaos run can use: the DynamoDB-compatible ones, PostgreSQL, Redis.
SERVER_NAMES = [*sorted(SERVERS), "postgresql", "redis"]


def chaos_server(name: str) -> Server:
    """A server of ``SERVER_NAMES``, not started."""
    if name == "postgresql":
        return PostgresServer()
    if name == "redis":
        return RedisServer()
    return SERVERS[name]()


def run_chaos(
    server_url: str,
    server_port: int,
    server_name: str,
    work: Path,
    *,
    duration: float = 40.0,
    workers: int = 6,
    seed: int | None = None,
    fault_rate: float = 1.0,
) -> Outcome:
    """``server_url``: a DynamoDB-compatible endpoint, or a PostgreSQL or Redis URL (that
    store, and the fenced record there)."""
    seed = seed if seed is not None else random.randrange(1 << 30)
    work.mkdir(parents=True, exist_ok=True)
    locks_table = "chaos-" + uuid.uuid4().hex[:6]
    app_table = "chaos-app-" + uuid.uuid4().hex[:6]
    sides = {"postgresql": PostgresSide, "redis": RedisSide}
    side: DynamoDBSide | PostgresSide | RedisSide = sides.get(
        server_url.split("://", 1)[0], DynamoDBSide
    )(server_url, server_port, locks_table, app_table)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS", "AWSFLOCK"))}
    base_env.update(NO_AWS_FILES)  # awsflock signs with its loopback key, as local_client does
    direct = {**base_env, **side.env()}
    subprocess.run([str(BIN), "table-create", "-q"], env=direct, check=True, timeout=60)
    side.create_app_table()
    critical_log = work / "critical.jsonl"
    invocations: list[Invocation] = []
    running: dict[int, tuple[subprocess.Popen[bytes], Path]] = {}
    state_lock = threading.Lock()
    stop_at = time.monotonic() + duration
    counts = Counter[str]()

    with side.proxy(fault_plan(random.Random(seed + 1), fault_rate)) as proxy:
        env = {**base_env, **side.proxied_env(proxy)}

        def contender(index: int) -> None:
            local = random.Random(seed * 100 + index)
            pidfile = work / f"child-{index}.pid"
            while time.monotonic() < stop_at:
                pool = local.random() < 0.5
                target, slots = ("chaos-pool", 2) if pool else ("chaos-lock", None)
                log = work / f"run-{index}-{len(invocations)}-{uuid.uuid4().hex[:4]}.log"
                inv = Invocation(target, slots, log)
                args = [
                    str(BIN),
                    "run",
                    target,
                    "--lease-duration",
                    f"{LEASE:g}s",
                    "--kill-after",
                    "0s",
                    *side.skew,
                    "--wait-time",
                    "15",
                    "--log-format",
                    "json",
                ]
                if slots:
                    args += ["--slots", str(slots)]
                args += [
                    "--",
                    sys.executable,
                    str(CRITICAL),
                    server_url,
                    app_table,
                    str(critical_log),
                ]
                with open(log, "wb") as err:
                    proc = subprocess.Popen(
                        args,
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                        env={**env, "CHAOS_PIDFILE": str(pidfile)},
                    )
                    inv.pid = proc.pid
                    with state_lock:
                        invocations.append(inv)
                        running[index] = (proc, pidfile)
                    inv.code = proc.wait()
                    with state_lock:
                        running.pop(index, None)

        def saboteur() -> None:
            local = random.Random(seed + 7)
            while time.monotonic() < stop_at - 2:
                time.sleep(local.uniform(1.5, 3.5))
                with state_lock:
                    if not running:
                        continue
                    index = local.choice(sorted(running))
                    proc, pidfile = running[index]
                    inv = invocations[-1]
                    for candidate in reversed(invocations):
                        if candidate.log.name.startswith(f"run-{index}-"):
                            inv = candidate
                            break
                # Alternate, so every run has both kinds (the first kind is chosen by the seed).
                if (counts["kills"] + counts["pauses"] + seed) % 2 == 0:
                    try:
                        proc.send_signal(signal.SIGKILL)
                        inv.killed = True
                        counts["kills"] += 1
                    except ProcessLookupError:
                        pass
                    continue
                # The classic stale holder: awsflock and its command both freeze past the lease.
                child = _child_of(proc.pid, pidfile)
                pids = [proc.pid] + ([child] if child else [])
                for pid in pids:
                    _signal(pid, signal.SIGSTOP)
                inv.paused = True
                counts["pauses"] += 1
                time.sleep(LEASE + SKEW + 1.5)
                # The command wakes first, so it tries its stale write before awsflock, waking
                # next, can stop it: fencing, not luck, must refuse that write.
                for pid in reversed(pids):
                    _signal(pid, signal.SIGCONT)
                    time.sleep(0.3)

        def operator() -> None:
            # Now and then an operator ends whatever lease holds the lock (SPEC: the holder is
            # then told so: its run exits 124, never "released").
            local = random.Random(seed + 13)
            while time.monotonic() < stop_at - 3:
                time.sleep(local.uniform(3.0, 6.0))
                target = local.choice(
                    [["chaos-lock"], ["chaos-pool", "--slot", str(local.randrange(2))]]
                )
                done = subprocess.run(
                    [str(BIN), "force-release", *target, "--yes", "--reason", "chaos"],
                    env=env,
                    capture_output=True,
                    timeout=60,
                )
                if done.returncode == 0:
                    counts["forced"] += 1

        threads = [
            threading.Thread(target=contender, args=(i,), daemon=True) for i in range(workers)
        ]
        threads.append(threading.Thread(target=saboteur, daemon=True))
        threads.append(threading.Thread(target=operator, daemon=True))
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=duration + 120)
        requests = sum(proxy.counts.values())
        faults = dict(proxy.faults)

    outcome = Outcome(summary={})
    audit = _audit(direct)
    forced = {(a["lock_id"], a.get("slot"), a["fencing_token"]) for a in audit}
    check(outcome, invocations, critical_log, side.counter, forced, skew=side.skew_s)
    check_held_at_end(outcome, invocations, side.held_now())
    check_forced(outcome, invocations, audit)
    _check_no_phantom(outcome, direct, side.skew)
    grants = sum(1 for inv in invocations for e in _events(inv.log) if e["event"] == "acquired")
    entries = _critical(critical_log)
    outcome.summary = {
        "server": server_name,
        "workers": workers,
        "duration_s": duration,
        "seed": seed,
        "runs": len(invocations),
        "exit_codes": dict(Counter(inv.code for inv in invocations)),
        "grants": grants,
        "writes_accepted": sum(1 for e in entries if e.get("write") == "accepted"),
        "writes_refused": sum(
            1 for e in entries if e.get("write") == "refused" or e.get("claim") == "refused"
        ),
        "requests": requests,
        "faults": faults,
        "kills": counts["kills"],
        "pauses": counts["pauses"],
        "forced": counts["forced"],
        "violations": 0,
    }
    outcome.summary["violations"] = len(outcome.violations)
    (work / "summary.json").write_text(json.dumps(outcome.summary, indent=2, default=str))
    return outcome


def check(
    outcome: Outcome,
    invocations: list[Invocation],
    critical_log: Path,
    counter_of: Any,
    forced: set[tuple[str, Any, int]] | frozenset[tuple[str, Any, int]] = frozenset(),
    *,
    skew: float = SKEW,
) -> None:
    """``forced``: (lock, slot, fencing token) of leases an operator force-released (they
    end early by design; the fenced writes still must refuse their holders). ``skew``: how
    long after a lease's end (as its holder saw it) it may be taken: the skew window on
    DynamoDB, 0 on PostgreSQL, where the server's clock ends it and the holder's view of its
    end is never later than that."""
    bad = outcome.violations
    # Every process exited with a code SPEC §3 allows, and never with a traceback.
    for inv in invocations:
        if inv.code not in ALLOWED_EXITS:
            bad.append(f"awsflock run exited {inv.code} ({inv.log.name})")
        if "Traceback" in inv.log.read_text(errors="replace"):
            bad.append(f"traceback in {inv.log.name}")
        # The proxy only delays, drops, resets and throttles: awsflock may fail for want of an
        # answer, never for a fault it misread (a busy answer taken for a refused permission).
        for e in _events(inv.log):
            if e["event"] in ("error", "release_failed") and e.get("error") not in NO_ANSWER:
                bad.append(f"{inv.log.name}: {e['event']} {e.get('error')}: {e['message'][:80]}")
    entries = _critical(critical_log)
    by_key: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for e in entries:
        by_key.setdefault((e["lock"], e["slot"]), []).append(e)
    for (lock, slot), items in by_key.items():
        if slot is not None and not 0 <= slot < 2:
            bad.append(f"{lock}: slot {slot} outside a pool of 2")
        # No lost update: the counter equals the number of accepted fenced writes.
        counter = counter_of(f"{lock}#{'-' if slot is None else slot}")
        accepted = [e for e in items if e.get("write") == "accepted"]
        done = {(e["pid"], e["token"]) for e in items if e.get("write") in ("accepted", "refused")}
        unlogged = [
            e for e in items if e.get("write") == "pending" and (e["pid"], e["token"]) not in done
        ]
        # A writer killed between its write and its log line may have landed one more write.
        if not len(accepted) <= counter <= len(accepted) + len(unlogged):
            bad.append(
                f"{lock}/{slot}: counter {counter} != {len(accepted)} accepted writes "
                f"(+ up to {len(unlogged)} unlogged)"
            )
        # No stale write accepted: none after a higher token's claim had been accepted.
        claims = [e for e in items if e.get("claim") == "accepted"]
        for w in accepted:
            for c in claims:
                if c["token"] > w["token"] and c["claim_done"] < w["write_sent"]:
                    bad.append(
                        f"{lock}/{slot}: stale token {w['token']} accepted after "
                        f"{c['token']} claimed"
                    )
    # Critical sections that ran to the end: their `run` was releasing when it was SIGKILLed.
    finished = {
        (e["lock"], e["slot"], e["token"])
        for e in entries
        if "write_done" in e or e.get("claim") == "refused"
    }
    # Tokens strictly increase per lock/slot, and a grant never overlaps the previous lease
    # while that lease could still be valid (the server's decision points).
    grants: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for inv in invocations:
        events = _events(inv.log)
        acquired = [e for e in events if e["event"] == "acquired"]
        if not acquired:
            continue
        g = acquired[0]
        # An acquire never reports a lease that is expired or about to be.
        if g.get("expires_in_s", LEASE) < LEASE * MIN_LEFT - 0.05:
            bad.append(
                f"{inv.log.name}: granted with only {g.get('expires_in_s')}s of its lease left"
            )
        end = g["ts"] + g.get("expires_in_s", LEASE)
        released = None
        # A release whose answer was lost and whose retry found the lock taken again reports
        # "not held" though it happened; when it happened is then unknown to this log.
        if any("could not release" in e.get("message", "") for e in events):
            released = "unknown"
        if (inv.target, g.get("slot"), g["fencing_token"]) in forced:
            released = "forced"
        # SIGKILLed after its command finished: its release may have landed unlogged.
        if inv.killed and (inv.target, g.get("slot"), g["fencing_token"]) in finished:
            released = "unknown"
        for e in events:
            if e["event"] == "renewed" and "expires_in_s" in e:
                end = max(end, e["ts"] + e["expires_in_s"])
            if e["event"] == "released":
                released = e["ts"]
        grants.setdefault((inv.target, g.get("slot")), []).append(
            {
                "ts": g["ts"],
                "token": g["fencing_token"],
                "end": end,
                "released": released,
                "log": inv.log.name,
            }
        )
    for (target, slot), items in grants.items():
        items.sort(key=lambda g: g["ts"])
        for before, after in zip(items, items[1:]):
            # Grants are ordered by when each process said "acquired", not by when the store
            # granted them: an acquire cleaning up its other attempts may say it after an
            # operator force-released its lease and another process took the lock. Only a
            # force-release can end a grant that early (an acquire returns a lease only with
            # half of it left), and its holder is told at its first renewal.
            reported_late = after["released"] == "forced" and after["token"] < before["token"]
            if after["token"] <= before["token"] and not reported_late:
                bad.append(f"{target}/{slot}: token {after['token']} not above {before['token']}")
            if (
                not reported_late
                and before["released"] is None
                and after["ts"] <= before["end"] + skew - 0.05
            ):
                # The new grant was logged before the old lease (as last renewed) could end.
                bad.append(
                    f"{target}/{slot}: {after['log']} granted at {after['ts']:.3f} "
                    f"while {before['log']}'s lease ran to {before['end']:.3f}"
                )


def check_held_at_end(
    outcome: Outcome, invocations: list[Invocation], held: list[dict[str, Any]]
) -> None:
    """Once every run has ended, a lease still running belongs to a run that was SIGKILLed (its
    lease runs out by itself) or that said it could not clean up an attempt: anything else is a
    phantom (a slot or lock held by no live process)."""
    by_pid = {inv.pid: inv for inv in invocations}
    for lease in held:
        inv = by_pid.get(lease.get("pid"))
        if inv is not None and inv.killed:
            continue
        if inv is not None and any(e["event"] == "abandon_failed" for e in _events(inv.log)):
            continue
        where = lease["lock"] + ("" if lease.get("slot") is None else f"/{lease['slot']}")
        bad_run = inv.log.name if inv is not None else f"pid {lease.get('pid')}"
        outcome.violations.append(f"{where}: held after every run ended, by {bad_run}")


def check_forced(
    outcome: Outcome, invocations: list[Invocation], audit: list[dict[str, Any]]
) -> None:
    """A holder whose lease was force-released is never told it released it, and its run
    does not exit as if all was well (124, or killed by the harness) — unless nothing told it:
    its command ended before a renewal was refused, and its release got no answer (the store
    unreachable or busy through all its tries), so it could only say it may still hold it."""
    forced = {(a["lock_id"], a.get("slot"), a["fencing_token"]) for a in audit}
    for inv in invocations:
        events = _events(inv.log)
        acquired = [e for e in events if e["event"] == "acquired"]
        if not acquired:
            continue
        g = acquired[0]
        if (inv.target, g.get("slot"), g["fencing_token"]) not in forced:
            continue
        if any(e["event"] == "released" for e in events):
            outcome.violations.append(f"{inv.log.name}: force-released, yet told 'released'")
        unanswered = any(
            e["event"] == "release_failed" and e.get("error") in NO_ANSWER for e in events
        )
        if inv.code not in (124, -signal.SIGKILL) and not inv.paused and not unanswered:
            outcome.violations.append(f"{inv.log.name}: force-released, yet exited {inv.code}")


def _held_now(client: Any, table: str) -> list[dict[str, Any]]:
    """Leases that still run by the item (not ended, not expired), with the pid that holds them."""
    now = time.time()
    held = []
    for key in ("chaos-lock", "chaos-pool"):
        item = client.get_item(TableName=table, Key={"lock_id": {"S": key}}, ConsistentRead=True)
        item = item.get("Item", {})
        prefixes = [f"s{i}_" for i in range(2)] if "slots" in item else [""]
        for p in prefixes:
            expires = item.get(f"{p}expires_ms")
            if expires is None or f"{p}ended" in item or int(expires["N"]) / 1000 <= now:
                continue
            pid = item.get(f"{p}pid", {}).get("N")
            held.append(
                {
                    "lock": key,
                    "slot": int(p[1]) if p else None,
                    "pid": int(pid) if pid else None,
                }
            )
    return held


def _audit(env: dict[str, str]) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(BIN), "audit", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def _check_no_phantom(outcome: Outcome, env: dict[str, str], skew: tuple[str, ...]) -> None:
    """After everything ended (and killed holders' leases ran out) nothing is held."""
    time.sleep(LEASE + SKEW + 1)
    for args in (["chaos-lock"], ["chaos-pool", "--slots", "2"], ["chaos-pool", "--slots", "2"]):
        result = subprocess.run(
            [str(BIN), "acquire", *args, "--no-wait", *skew],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if result.returncode != 0:
            outcome.violations.append(f"phantom lock on {args}: {result.stderr.strip()}")


def _events(log: Path) -> list[dict[str, Any]]:
    events = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                continue  # a line cut short by SIGKILL
    return events


def _critical(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _child_of(parent: int, pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text())
        stat = Path(f"/proc/{pid}/stat").read_text().split()
    except (OSError, ValueError):
        return None
    return pid if int(stat[3]) == parent else None


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_active(client: Any, table: str) -> None:
    for _ in range(100):
        if client.describe_table(TableName=table)["Table"]["TableStatus"] == "ACTIVE":
            return
        time.sleep(0.1)
