"""Benchmark awsflock against awsflock 0.2.0, side by side, in one run on one server.

Run it through ``scripts/bench`` (which installs both). It starts moto's server behind a
counting proxy (requests counted by X-Amz-Target), measures both tools interleaved, prints a
table of medians with new/old ratios, and writes the numbers to bench-results/.

It then measures this awsflock's PostgreSQL and Redis stores beside its DynamoDB store on AWS's
DynamoDB Local, interleaved in the same run, and prints a table with PG/DDB and Redis/DDB ratios
(requests per command, latency per operation from the CLI and in-process, acquire+release
cycle, hand-off, contention throughput). ``--only-stores`` runs just that part (and needs no
awsflock 0.2.0).

Last, scripts/bench_floors.py times the library's acquire+release (this checkout, in this
process) beside its floor on each store: redis-py's Lock, a plain PostgreSQL row lease, and on
DynamoDB Local the same requests sent raw with botocore and a plain PutItem + DeleteItem.
``--floors`` runs just that part (and needs no awsflock 0.2.0).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.faultproxy import FaultProxy  # noqa: E402 - after the path is set
from tests.helpers import peak_rss_kb  # noqa: E402
from tests.redisproxy import RedisFaultProxy  # noqa: E402
from tests.servers import (  # noqa: E402
    NO_AWS_FILES,
    Dynalite,
    DynamoDBLocal,
    MotoServer,
    PostgresServer,
    RedisServer,
    local_client,
)

DEFAULT_NEW = Path(sys.executable).parent / "awsflock"
#: A row of a printed table: (measure, first value, second value or None, unit).
Row = tuple[str, Any, Any, str]


class Tool:
    def __init__(self, name: str, binary: Path, env: dict[str, str]) -> None:
        self.name, self.binary, self.env = name, binary, env

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, env=self.env, timeout=300
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"{self.name} {args}: {result.returncode} {result.stderr}")
        return result

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(self.binary), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )


def timed(action: Callable[[], Any]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def lock() -> str:
    return "bench-" + uuid.uuid4().hex[:8]


def requests_per_op(tool: Tool, proxy: FaultProxy) -> dict[str, float]:
    def count(action: Callable[[], Any]) -> float:
        proxy.reset_counts()
        action()
        return float(sum(proxy.counts.values()))

    name = lock()
    out: dict[str, Any] = {}
    lease: dict[str, str] = {}
    # A name never granted: awsflock's take pins that nothing came before (two requests, once
    # per name); 0.2.0's put is one.
    out["acquire (a new name)"] = count(
        lambda: lease.update(id=tool.run("acquire", name).stdout.strip())
    )
    out["busy --no-wait"] = count(lambda: tool.run("acquire", name, "--no-wait", check=False))
    out["renew"] = count(
        lambda: lease.update(id=tool.run("renew", name, lease["id"]).stdout.strip())
    )
    out["release"] = count(lambda: tool.run("release", name, lease["id"]))
    out["acquire (released lock)"] = count(lambda: tool.run("acquire", name))
    return out


def handoff(tool: Tool, waited: float) -> float:
    name = lock()
    holder = tool.run("acquire", name, "--lease-duration", "10m").stdout.strip()
    waiter = tool.popen("acquire", name, "--wait-time", "300", "--lease-duration", "10m")
    time.sleep(waited)
    tool.run("release", name, holder)
    released = time.perf_counter()
    waiter.communicate(timeout=300)
    if waiter.returncode != 0:
        raise RuntimeError(f"{tool.name} waiter failed")
    return time.perf_counter() - released


def throughput(tool: Tool, processes: int, cycles: int, old: bool) -> float:
    name = lock()
    options = ["--wait-time", "120", "--lease-duration", "300" if old else "60"]

    def loop() -> None:
        for _ in range(cycles):
            lease = tool.run("acquire", name, *options).stdout.strip()
            tool.run("release", name, lease)

    start = time.perf_counter()
    threads = [threading.Thread(target=loop) for _ in range(processes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return processes * cycles / (time.perf_counter() - start)


def reclaim(tool: Tool, lease_s: int, old: bool) -> float:
    """A holder dies without releasing; how long until a waiter holds the lock."""
    name = lock()
    if old:
        tool.run("acquire", name, "--lease-duration", str(lease_s))  # exits, never releases
        died = time.perf_counter()
    else:
        holder = tool.popen(
            "run",
            name,
            "--lease-duration",
            f"{lease_s}s",
            "--kill-after",
            "0s",
            "--",
            "sleep",
            "300",
        )
        for _ in range(200):
            if tool.run("status", name, check=False).returncode == 0:
                break
            time.sleep(0.05)
        holder.send_signal(signal.SIGKILL)
        holder.communicate()
        died = time.perf_counter()
    tool.run("acquire", name, "--wait-time", "120")
    return time.perf_counter() - died


def line(tool: Tool, proxy: FaultProxy, waiters: int, fair: bool, window: float) -> dict[str, Any]:
    """``waiters`` processes queue (0.2 s apart) behind a holder, with or without --fair.
    Measures their requests per waiter per second while they wait (proxy counts), then hands
    the lock on five times: seconds from each release to the next grant, and whether grants
    came in order of arrival."""
    name = lock()
    holder = tool.run("acquire", name, "--lease-duration", "10m").stdout.strip()
    extra = ["--fair"] if fair else []
    procs = []
    for _ in range(waiters):
        args = ("acquire", name, "--wait-time", "600", "--lease-duration", "10m", "-q", *extra)
        procs.append(tool.popen(*args))
        time.sleep(0.2)
    time.sleep(3.0)  # every waiter is past its start-up and polling
    proxy.reset_counts()
    time.sleep(window)
    per_waiter = sum(proxy.counts.values()) / waiters / window
    latencies, order = [], []
    for _ in range(min(5, waiters)):
        tool.run("release", name, holder)
        released = time.perf_counter()
        while True:
            done = [i for i, p in enumerate(procs) if i not in order and p.poll() is not None]
            if done:
                break
            if time.perf_counter() - released > 120:
                raise RuntimeError("no waiter was granted the lock within 120 s")
            time.sleep(0.01)
        latencies.append(time.perf_counter() - released)
        order.append(done[0])
        holder = (procs[done[0]].stdout.read() if procs[done[0]].stdout else "").strip()
    for proc in procs:
        proc.kill()
        proc.communicate()
    tool.run("release", name, holder, check=False)
    return {
        "requests_per_waiter_per_s": per_waiter,
        "hand_off_median_s": median(latencies),
        "hand_off_max_s": max(latencies),
        "in_arrival_order": order == sorted(order),
        "order": order,
    }


def peak_rss_mb(argv: list[str], env: dict[str, str]) -> float:
    return peak_rss_kb(argv, env) / 1024


def fill(endpoint: str, table: str, count: int) -> None:
    def work(start: int, stop: int) -> None:
        client = local_client(endpoint)
        now = int(time.time())
        for base in range(start, stop, 25):
            items = [
                {
                    "PutRequest": {
                        "Item": {
                            "lock_id": {"S": f"job-{i:06d}"},
                            "lease_id": {"S": str(uuid.uuid4())},
                            "owner": {"S": f"host-{i % 50}"},
                            "lease_duration": {"N": "3600"},
                            "expiration_time": {"N": str(now + 3600)},
                        }
                    }
                }
                for i in range(base, min(base + 25, stop))
            ]
            pending: dict[str, Any] = {table: items}
            while pending:
                pending = (
                    client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
                )

    step = count // 4
    threads = [
        threading.Thread(target=work, args=(k * step, count if k == 3 else (k + 1) * step))
        for k in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# -- PostgreSQL and Redis beside DynamoDB (--only-stores) ------------------------------------

#: The stores side by side, by key in the order of their columns: their titles, and the short
#: names of the ratios to the first (``PG/DDB``).
STORES = {"ddb": "DynamoDB Local", "pg": "PostgreSQL", "redis": "Redis"}
SHORT = {"ddb": "DDB", "pg": "PG", "redis": "Redis"}
#: A row of the stores' table: (measure, a value per ``STORES`` key, unit).
StoreRow = tuple[str, dict[str, float], str]


class DynamoDBLocalAsRun(DynamoDBLocal):
    """DynamoDB Local with the JVM's default flags, as users run it: the tests' server trades
    steady-state speed (C1 only, serial GC) for a faster start."""

    def command(self) -> list[str]:
        return [arg for arg in super().command() if not arg.startswith("-XX:")]


class PgCounter:
    """A TCP proxy in front of PostgreSQL that counts what clients send, by protocol message:
    ``statements`` (a simple Query 'Q' or an extended-protocol Execute 'E': one per statement
    run), ``connections`` (StartupMessages) and ``setup`` (the client's messages before its
    first statement: SSL/GSS requests, the startup message, SCRAM's auth responses 'p').
    Each message is counted before it is forwarded, so a count is complete once the client
    has its answer."""

    STARTUP, SSL, GSS = 196608, 80877103, 80877104

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])

    def __enter__(self) -> PgCounter:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()

    def reset_counts(self) -> None:
        with self._lock:
            self.counts.clear()

    def _count(self, key: str) -> None:
        with self._lock:
            self.counts[key] += 1

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._relay, args=(server, client), daemon=True).start()
            threading.Thread(target=self._requests, args=(client, server), daemon=True).start()

    @staticmethod
    def _recv(sock: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    @staticmethod
    def _end(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            src.shutdown(socket.SHUT_RD)

    def _relay(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        self._end(src, dst)

    def _requests(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            started = False
            while not started:  # untyped messages: SSL/GSS requests, then the startup
                head = self._recv(src, 8)
                code = int.from_bytes(head[4:], "big")
                body = self._recv(src, int.from_bytes(head[:4], "big") - 8)
                self._count("setup")
                if code == self.STARTUP:
                    started = True
                    self._count("connections")
                elif code not in (self.SSL, self.GSS):
                    break  # a cancel request: nothing follows
                dst.sendall(head + body)
            while started:
                head = self._recv(src, 5)
                body = self._recv(src, int.from_bytes(head[1:], "big") - 4)
                kind = head[:1]
                if kind in (b"Q", b"E"):
                    self._count("statements")
                elif kind == b"p":
                    self._count("setup")
                dst.sendall(head + body)
        except (OSError, EOFError):
            pass
        self._end(src, dst)
        with contextlib.suppress(OSError):
            src.close()
            dst.close()


class RedisCounter(RedisFaultProxy):
    """The Redis proxy (tests/redisproxy.py; its plan passes everything), which counts each
    command by target (``counts``: the awsflock step a script call makes, else the command's
    name), counting round trips too (``trips``, by the target of the command that begins one):
    a command read when nothing else the client sent was waiting begins one, as the commands
    of a pipeline arrive together. A pipeline split across reads would count twice, so a count
    is at most one high per split, never low."""

    LOGIN = ("auth", "hello")

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__(upstream)
        self.trips: Counter[str] = Counter()

    def _read_request(self, sock: socket.socket, buffer: bytearray) -> bytes | None:
        fresh = not buffer
        request = super()._read_request(sock, buffer)
        if request is not None and fresh:
            with self._lock:
                self.trips[self._target(request)] += 1
        return request

    def seen(self) -> dict[str, float]:
        """What was counted since the last call, and the counts start again: ``commands`` (all
        of them, and each target's as ``command TARGET``), ``log-ins`` (round trips that begin
        with AUTH or HELLO) and ``round trips`` (the others)."""
        with self._lock:
            logins = sum(self.trips[k] for k in self.LOGIN)
            got = {
                "commands": float(sum(self.counts.values())),
                "log-ins": float(logins),
                "round trips": float(sum(self.trips.values()) - logins),
                **{f"command {k}": float(v) for k, v in sorted(self.counts.items())},
            }
            self.counts.clear()
            self.faults.clear()
            self.trips.clear()
        return got

    @staticmethod
    def spelled(got: dict[str, float]) -> str:
        """The commands of a ``seen`` by target: "auth 1, config 4, ..."."""
        return ", ".join(
            f"{k.removeprefix('command ')} {v:g}"
            for k, v in got.items()
            if k.startswith("command ")
        )


def library_latency(table: Any, repeats: int) -> dict[str, list[float]]:
    """acquire, renew and release through the library, in this process, on a warm
    connection: the store's own cost, without a process start-up or a connection made."""
    samples: dict[str, list[float]] = {"acquire": [], "renew": [], "release": []}
    for _ in range(repeats):
        name = lock()
        start = time.perf_counter()
        lease = table.acquire(name, wait=0)
        renewed = time.perf_counter()
        lease = lease.renew()
        releasing = time.perf_counter()
        lease.release()
        end = time.perf_counter()
        samples["acquire"].append(renewed - start)
        samples["renew"].append(releasing - renewed)
        samples["release"].append(end - releasing)
    return samples


def cli_latency(tool: Tool) -> dict[str, float]:
    """acquire, renew and release as separate ``awsflock`` commands (each a new process)."""
    name = lock()
    box: dict[str, str] = {}
    out = {"acquire": timed(lambda: box.update(id=tool.run("acquire", name).stdout.strip()))}
    out["renew"] = timed(lambda: box.update(id=tool.run("renew", name, box["id"]).stdout.strip()))
    out["release"] = timed(lambda: tool.run("release", name, box["id"]))
    return out


def cycle_once(tool: Tool, name: str) -> None:
    tool.run("release", name, tool.run("acquire", name).stdout.strip())


def count_per_op(tool: Tool, counts: Callable[[], dict[str, float]]) -> dict[str, dict[str, float]]:
    """What the counter saw for each command; ``counts`` resets it and returns its counts."""
    name = lock()
    lease: dict[str, str] = {}
    out: dict[str, dict[str, float]] = {}

    def count(label: str, action: Callable[[], Any]) -> None:
        counts()
        action()
        out[label] = counts()

    count("acquire", lambda: lease.update(id=tool.run("acquire", name).stdout.strip()))
    count("busy --no-wait", lambda: tool.run("acquire", name, "--no-wait", check=False))
    count("renew", lambda: lease.update(id=tool.run("renew", name, lease["id"]).stdout.strip()))
    count("release", lambda: tool.run("release", name, lease["id"]))
    return out


def stores(new_bin: Path, quick: bool, results: dict[str, Any]) -> list[StoreRow]:
    """The PostgreSQL and Redis stores beside the DynamoDB store on DynamoDB Local, interleaved
    in one run: requests per command, latency per operation (CLI and library), acquire+release
    cycle, hand-off and contention throughput. Rows: (measure, a value per ``STORES`` key,
    unit)."""
    from awsflock.lock.lease import LockTable
    from awsflock.protocol import DEFAULT_REQUEST_TIMEOUT
    from awsflock.stores import kinds

    began = time.perf_counter()
    repeats = 5 if quick else 10
    rows: list[StoreRow] = []
    out: dict[str, Any] = {}
    samples: dict[str, Any] = {}
    results["stores"] = out
    results["stores_samples"] = samples
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS", "DYNAMO", "PG"))}
    base.update(NO_AWS_FILES)  # awsflock signs with its loopback key, as local_client does
    ddb = DynamoDBLocalAsRun().start(timeout=90)
    pg, redis = PostgresServer(), RedisServer()
    opened: list[Any] = []

    def open_store(url: str) -> Any:
        """The store a URL names, opened as the CLI opens it (closed at the end)."""
        named = kinds.parse(url)
        store = kinds.get(named.kind).open(named, kinds.Settings("bench", DEFAULT_REQUEST_TIMEOUT))
        opened.append(store)
        return store

    try:
        pg.start()
        redis.start()
        resp = RedisCounter(("127.0.0.1", redis.port))
        with (
            FaultProxy(("127.0.0.1", ddb.port)) as http,
            PgCounter(pg.port) as wire,
            resp,
        ):
            urls = {"pg": f"{pg.url}?table=bench", "redis": f"{redis.url}?prefix=bench"}
            tools = {
                "ddb": Tool(
                    STORES["ddb"],
                    new_bin,
                    {**base, "AWSFLOCK_TABLE": "bench", "AWSFLOCK_ENDPOINT_URL": ddb.url},
                ),
                **{
                    key: Tool(STORES[key], new_bin, {**base, "AWSFLOCK_STORE": url})
                    for key, url in urls.items()
                },
            }
            for tool in tools.values():
                tool.run("table-create", "-q")
            tables = {
                "ddb": LockTable("bench", client=local_client(ddb.url)),
                **{key: LockTable(store=open_store(url)) for key, url in urls.items()},
            }

            def row(label: str, unit: str, values: dict[str, float]) -> None:
                out[label] = values
                rows.append((label, values, unit))

            # Requests per command, counted through the proxies (timings go direct). Each
            # store's counter resets itself and says what it saw; the row shows one of its
            # counts: DDB's HTTP requests, PG's statements, Redis's round trips past its log-in.
            def http_counts() -> dict[str, float]:
                got = {"requests": float(sum(http.counts.values()))}
                http.reset_counts()
                return got

            def wire_counts() -> dict[str, float]:
                got = {k: float(v) for k, v in wire.counts.items()}
                wire.reset_counts()
                return got

            through = {
                "ddb": {"AWSFLOCK_ENDPOINT_URL": http.url},
                "pg": {"AWSFLOCK_STORE": urls["pg"].replace(f":{pg.port}/", f":{wire.port}/")},
                "redis": {"AWSFLOCK_STORE": resp.url_for(urls["redis"])},
            }
            counters = {"ddb": http_counts, "pg": wire_counts, "redis": resp.seen}
            shown = {"ddb": "requests", "pg": "statements", "redis": "round trips"}
            seen = {
                key: count_per_op(Tool(key, new_bin, {**tool.env, **through[key]}), counters[key])
                for key, tool in tools.items()
            }
            for op in seen["ddb"]:
                row(
                    f"requests: {op} (DDB HTTP; PG statements; Redis round trips)",
                    "count",
                    {key: seen[key][op].get(shown[key], 0.0) for key in tools},
                )
            out["pg_connection_setup"] = seen["pg"]
            out["redis_commands"] = seen["redis"]
            conns = {op: got.get("connections", 0) for op, got in seen["pg"].items()}
            setup = {op: got.get("setup", 0) for op, got in seen["pg"].items()}

            # Warm-up: the JVM's JIT, the servers' caches, the OS's page cache of the tool.
            for key, tool in tools.items():
                for _ in range(3):
                    tool.run("release", "warm-up", tool.run("acquire", "warm-up").stdout.strip())
                library_latency(tables[key], 10)

            cli: dict[str, dict[str, list[float]]] = {k: {} for k in tools}
            for _ in range(repeats):
                for key, tool in tools.items():
                    for op, took in cli_latency(tool).items():
                        cli[key].setdefault(op, []).append(took)
            for op in ("acquire", "renew", "release"):
                row(
                    f"CLI {op} (a new process and connection)",
                    "s",
                    {k: median(cli[k][op]) for k in tools},
                )
            samples["cli"] = cli

            lib: dict[str, dict[str, list[float]]] = {k: {} for k in tools}
            for _ in range(repeats):
                for key in tools:
                    for op, took_all in library_latency(tables[key], 10).items():
                        lib[key].setdefault(op, []).extend(took_all)
            for op in ("acquire", "renew", "release"):
                row(
                    f"library {op}, in-process, warm connection",
                    "ms",
                    {k: 1000 * median(lib[k][op]) for k in tools},
                )

            cycles: dict[str, list[float]] = {k: [] for k in tools}
            for _ in range(repeats):
                for key, tool in tools.items():
                    name = lock()
                    cycles[key].append(timed(functools.partial(cycle_once, tool, name)))
            row("CLI acquire+release cycle", "s", {k: median(v) for k, v in cycles.items()})
            samples["cycle"] = cycles

            hands: dict[str, list[float]] = {k: [] for k in tools}
            for _ in range(repeats):
                for key, tool in tools.items():
                    hands[key].append(handoff(tool, 1.0))
            row(
                "hand-off: release to the waiter's grant (waited 1s)",
                "s",
                {k: median(v) for k, v in hands.items()},
            )
            samples["hand-off"] = hands

            k, per = 4, (3 if quick else 5)
            row(
                f"throughput, {k} processes looping acquire/release",
                "grants/s",
                {key: throughput(tool, k, per, False) for key, tool in tools.items()},
            )
            client = redis.client()
            version = client.info("server")["redis_version"]
            client.close()
    finally:
        for store in opened:
            store.close()
        ddb.stop()
        pg.stop()
        redis.stop()

    def place(server: PostgresServer | RedisServer) -> str:
        return "in /dev/shm" if str(server.dir).startswith("/dev/shm/") else f"in {server.dir}"

    notes = [
        "PG/DDB and Redis/DDB below 1 mean less time than DynamoDB Local; above 1 on"
        " throughput, more grants",
        "no store pays a disk: DynamoDB Local -inMemory (JVM defaults); PostgreSQL 15"
        f" {place(pg)} (fsync on; synchronous_commit off, which the store's steps turn on);"
        f" Redis {version} {place(redis)} with its AOF fsynced on every write (appendfsync"
        " always, as the store requires)",
        "DDB requests counted by an HTTP proxy; PG statements by a TCP proxy reading the wire"
        " protocol (Query/Execute messages); Redis round trips by a RESP proxy: a command that"
        " arrives when none of the client's is waiting begins one (a pipeline's come together),"
        " its log-in (AUTH) not counted; timings go direct, not through them",
        "hand-off and throughput: a DynamoDB or PostgreSQL waiter tries about once a second"
        " (jittered), so its hand-off is mostly where the release falls in its cycle; a Redis"
        " waiter is woken by a message the release publishes (pub/sub), and may hold the lock"
        " before the releasing process has exited, so a hand-off near 0 is below what this"
        f" measures (median of {repeats} each; samples in the JSON)",
        "PostgreSQL connections per command: "
        + ", ".join(f"{op} {conns[op]:g}" for op in conns)
        + "; client messages to set each up (SSL request, startup, SCRAM): "
        + ", ".join(f"{op} {setup[op] / max(1, conns[op]):g}" for op in setup),
        "Redis commands per command, log-in included: "
        + "; ".join(
            f"{op} {got['commands']:g} in {got['round trips'] + got['log-ins']:g} round trips"
            f" ({RedisCounter.spelled(got)})"
            for op, got in seen["redis"].items()
        ),
    ]
    notes.append(f"this section took {time.perf_counter() - began:.0f}s")
    out["notes"] = notes
    results["stores_notes"] = notes
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench")
    parser.add_argument("--old", type=Path, help="awsflock 0.2.0's executable")
    parser.add_argument("--new", type=Path, default=DEFAULT_NEW, help="this awsflock's executable")
    parser.add_argument("--quick", action="store_true", help="fewer repeats, shorter waits")
    parser.add_argument("--list-items", type=int, default=100_000)
    parser.add_argument(
        "--only-line", action="store_true", help="only the fair-waiting measures (and requests)"
    )
    parser.add_argument(
        "--only-stores",
        action="store_true",
        help="only the PostgreSQL and Redis stores beside DynamoDB (on DynamoDB Local);"
        " needs no --old",
    )
    parser.add_argument(
        "--floors",
        action="store_true",
        help="only the library's acquire+release beside its floor on each store (redis-py's"
        " Lock, a plain PostgreSQL row lease, raw DynamoDB requests); needs no --old",
    )
    parser.add_argument(
        "--otel",
        type=Path,
        default=None,
        metavar="AWSFLOCK",
        help="only the cost of the otel extra installed but unconfigured: this executable (with"
        " it) beside --new (without it), on moto's server; needs no --old",
    )
    parser.add_argument(
        "--library",
        action="store_true",
        help="only the library in a service: sync and asyncio cycles beside redis-py's Lock,"
        " pg_advisory_lock and a row lease; 1,000 holds; the event loop's worst stall",
    )
    parser.add_argument(
        "--startup",
        action="store_true",
        help="only start-up: whole commands and their phases beside 0.2.0, on DynamoDB Local"
        " and moto's server",
    )
    args = parser.parse_args()
    if (
        args.old is None
        and not (args.only_stores or args.floors or args.library)
        and args.otel is None
    ):
        parser.error(
            "--old (awsflock 0.2.0's executable) is needed, except with --only-stores, --floors"
            " or --library"
        )
    new_bin: Path = args.new
    repeats = 3 if args.quick else 10
    waits = [1.0, 10.0] if args.quick else [1.0, 10.0, 35.0]
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
        },
    }
    rows: list[Row] = []
    line_rows: list[Row] = []
    if args.only_stores:
        report(results, rows, line_rows, stores(new_bin, args.quick, results))
        return 0
    if args.floors:
        import bench_floors

        report(results, [], [], [], bench_floors.floors(args.quick, results))
        return 0
    if args.library:
        import bench_library

        report(results, [], [], [], bench_library.library(args.quick, results))
        return 0
    if args.startup:
        report(results, startup(args.old, new_bin, repeats, results), [], [])
        return 0
    if args.otel is not None:
        import bench_startup

        server = MotoServer().start()
        try:
            found, raw = bench_startup.otel_unconfigured(server.url, new_bin, args.otel, repeats)
        finally:
            server.stop()
        results["otel extra unconfigured (with, without)"] = raw
        print("columns: with the otel extra | without it (new/old: with/without)")
        report(results, found, [], [])
        return 0

    server = MotoServer().start()
    try:
        with FaultProxy(("127.0.0.1", server.port)) as proxy:
            base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS", "DYNAMO"))}
            base.update(
                {
                    "AWS_DEFAULT_REGION": "us-east-1",
                    "AWS_ACCESS_KEY_ID": "x",
                    "AWS_SECRET_ACCESS_KEY": "x",
                    "AWSFLOCK_TABLE": "bench",
                }
            )
            new = Tool("new", new_bin, {**base, "AWSFLOCK_ENDPOINT_URL": proxy.url})
            old = Tool("0.2.0", args.old, {**base, "DYNAMO_ENDPOINT_URL": proxy.url})
            new.run("table-create", "-q")

            for tool in (new, old):
                results[f"requests_{tool.name}"] = requests_per_op(tool, proxy)
            for op in results["requests_new"]:
                rows.append(
                    (
                        f"requests: {op}",
                        results["requests_new"][op],
                        results["requests_0.2.0"][op],
                        "count",
                    )
                )

            def interleave(label: str, make: Callable[[Tool], Callable[[], Any]]) -> None:
                samples: dict[str, list[float]] = {"new": [], "0.2.0": []}
                for _ in range(repeats):
                    for tool in (new, old):
                        samples[tool.name].append(timed(make(tool)))
                results[label] = {k: median(v) for k, v in samples.items()}
                rows.append((label, results[label]["new"], results[label]["0.2.0"], "s"))

            if not args.only_line:
                interleave("--help start-up", lambda t: lambda: t.run("--help"))

                def cycle(tool: Tool) -> Callable[[], None]:
                    def go() -> None:
                        name = lock()
                        lease = tool.run("acquire", name).stdout.strip()
                        tool.run("release", name, lease)

                    return go

                interleave("acquire+release cycle", cycle)

                def renew(tool: Tool) -> Callable[[], None]:
                    name = lock()
                    lease = tool.run("acquire", name).stdout.strip()
                    return lambda: tool.run("renew", name, lease)

                interleave("renew", renew)

                for waited in waits:
                    samples: dict[str, list[float]] = {"new": [], "0.2.0": []}
                    for _ in range(1 if waited > 10 else max(1, repeats // 3)):
                        for tool in (new, old):
                            samples[tool.name].append(handoff(tool, waited))
                    label = f"hand-off after waiting {waited:g}s"
                    results[label] = {k: median(v) for k, v in samples.items()}
                    rows.append((label, results[label]["new"], results[label]["0.2.0"], "s"))

                k, cycles = 4, (3 if args.quick else 5)
                label = f"throughput, {k} contending processes"
                results[label] = {
                    "new": throughput(new, k, cycles, False),
                    "0.2.0": throughput(old, k, cycles, True),
                }
                rows.append((label, results[label]["new"], results[label]["0.2.0"], "grants/s"))

            window = 5.0 if args.quick else 10.0
            for waiters in (5, 20):
                fair = line(new, proxy, waiters, True, window)
                unfair = line(new, proxy, waiters, False, window)
                results[f"line of {waiters}"] = {"fair": fair, "unfair": unfair}
                line_rows.append(
                    (
                        f"line of {waiters}: requests per waiter per second",
                        fair["requests_per_waiter_per_s"],
                        unfair["requests_per_waiter_per_s"],
                        "req/s",
                    )
                )
                line_rows.append(
                    (
                        f"line of {waiters}: hand-off, median of 5",
                        fair["hand_off_median_s"],
                        unfair["hand_off_median_s"],
                        "s",
                    )
                )
                line_rows.append(
                    (
                        f"line of {waiters}: hand-off, slowest of 5",
                        fair["hand_off_max_s"],
                        unfair["hand_off_max_s"],
                        "s",
                    )
                )
                line_rows.append(
                    (
                        f"line of {waiters}: 5 grants in arrival order",
                        float(fair["in_arrival_order"]),
                        float(unfair["in_arrival_order"]),
                        "yes=1",
                    )
                )

            if not args.only_line:
                lease_s = 5
                label = f"reclaim after a SIGKILLed holder (lease {lease_s}s, skew 5s)"
                results[label] = {
                    "new": reclaim(new, lease_s, False),
                    "0.2.0": reclaim(old, lease_s, True),
                }
                rows.append((label, results[label]["new"], results[label]["0.2.0"], "s"))

                hold_s = 10 if args.quick else 60
                name = lock()
                label = f"peak memory: run holding a lock for {hold_s}s"
                results[label] = {
                    "new": peak_rss_mb(
                        [str(new_bin), "run", name, "--", "sleep", str(hold_s)], new.env
                    ),
                    "0.2.0 (acquire; it has no run)": peak_rss_mb(
                        [str(args.old), "acquire", lock()], old.env
                    ),
                }
                rows.append(
                    (
                        label,
                        results[label]["new"],
                        results[label]["0.2.0 (acquire; it has no run)"],
                        "MB",
                    )
                )
    finally:
        server.stop()

    if args.list_items and not args.only_line:
        dyn = Dynalite().start()
        try:
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith("AWS")},
                "AWSFLOCK_ENDPOINT_URL": dyn.url,
                "AWSFLOCK_TABLE": "bench-list",
            }
            subprocess.run([str(new_bin), "table-create", "-q"], env=env, check=True)
            fill(dyn.url, "bench-list", args.list_items)
            start = time.perf_counter()
            peak = peak_rss_mb([str(new_bin), "list", "--json"], env)
            elapsed = time.perf_counter() - start
            label = f"list over {args.list_items:,} items (dynalite)"
            results[label] = {"seconds": elapsed, "peak_mb": peak}
            rows.append((label + ": time", elapsed, None, "s"))
            rows.append((label + ": peak memory", peak, None, "MB"))
        finally:
            dyn.stop()

    store_rows: list[StoreRow] = [] if args.only_line else stores(new_bin, args.quick, results)
    floor_lines: list[str] = []
    if not args.only_line:
        import bench_floors

        floor_lines = bench_floors.floors(args.quick, results)
    report(results, rows, line_rows, store_rows, floor_lines)
    return 0


def startup(old: Path, new: Path, repeats: int, results: dict[str, Any]) -> list[Row]:
    """Whole commands and their phases, beside 0.2.0 (scripts/bench_startup.py), on DynamoDB
    Local and on moto's server; then the keep-alive renewer's memory and ``run -- true``."""
    import bench_startup

    rows: list[Row] = []
    for title, kind in (("DynamoDB Local", DynamoDBLocal), ("moto", MotoServer)):
        server = kind().start()
        try:
            found, raw = bench_startup.measure(title, server.url, old, new, repeats)
            rows += found
            results[f"startup on {title}"] = raw
            if kind is DynamoDBLocal:
                ran = bench_startup.run_true(new, server.url, repeats)
                peak = bench_startup.renewer_peak_mb(new, server.url)
                results["run -- true"], results["renewer peak MB"] = ran, peak
                rows.append((f"{title}: run NAME -- true (this awsflock)", ran, None, "s"))
                rows.append(("keep-alive renewer: peak memory (VmHWM)", peak, None, "MB"))
        finally:
            server.stop()
    return rows


def report(
    results: dict[str, Any],
    rows: list[Row],
    line_rows: list[Row],
    store_rows: list[StoreRow],
    floor_lines: tuple[str, ...] | list[str] = (),
) -> None:
    """Print the tables (``floor_lines``: scripts/bench_floors.py's, as they are) and write the
    numbers to bench-results/."""
    print(f"awsflock benchmark, {results['date']}, {results['machine']}")
    if rows:
        print(f"\n{'measure':<58} {'new':>10} {'0.2.0':>10} {'new/old':>8}  unit")
    for label, a, b, unit in rows:
        ratio = f"{a / b:.2f}" if isinstance(b, (int, float)) and b else "-"
        b_text = f"{b:10.3f}" if isinstance(b, (int, float)) else f"{'-':>10}"
        print(f"{label:<58} {a:10.3f} {b_text} {ratio:>8}  {unit}")
    if line_rows:
        print(
            f"\n{'fair waiting (this awsflock)':<58} {'--fair':>10} {'unfair':>10}"
            f" {'fair/un':>8}  unit"
        )
    for label, a, b, unit in line_rows:
        ratio = f"{a / b:.2f}" if b else "-"
        print(f"{label:<58} {a:10.3f} {b:10.3f} {ratio:>8}  {unit}")
    first, *others = STORES
    width = max([58, *(len(label) for label, _, _ in store_rows)])
    if store_rows:
        print(
            f"\n{'stores (this awsflock)':<{width}}"
            + "".join(f" {title:>14}" for title in STORES.values())
            + "".join(f" {SHORT[k] + '/' + SHORT[first]:>9}" for k in others)
            + "  unit"
        )
    for label, values, unit in store_rows:
        ratios = [f"{values[k] / values[first]:.2f}" if values[first] else "-" for k in others]
        print(
            f"{label:<{width}}"
            + "".join(f" {values[k]:14.3f}" for k in STORES)
            + "".join(f" {ratio:>9}" for ratio in ratios)
            + f"  {unit}"
        )
    for note in results.get("stores_notes", []) if store_rows else []:
        print(f"  note: {note}")
    for text in floor_lines:
        print(text)
    out = ROOT / "bench-results"
    out.mkdir(exist_ok=True)
    path = out / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=2))
    print(f"written to {path.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
