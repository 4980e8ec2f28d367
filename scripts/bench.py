"""Benchmark awsflock against awsflock 0.2.0, side by side, in one run on one server.

Run it through ``scripts/bench`` (which installs both). It starts moto's server behind a
counting proxy (requests counted by X-Amz-Target), measures both tools interleaved, prints a
table of medians with new/old ratios, and writes the numbers to bench-results/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.faultproxy import FaultProxy  # noqa: E402 - after the path is set
from tests.helpers import peak_rss_kb  # noqa: E402
from tests.servers import Dynalite, MotoServer, local_client  # noqa: E402

DEFAULT_NEW = Path(sys.executable).parent / "awsflock"


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
    out["acquire"] = count(lambda: lease.update(id=tool.run("acquire", name).stdout.strip()))
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


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench")
    parser.add_argument("--old", type=Path, required=True, help="awsflock 0.2.0's executable")
    parser.add_argument("--new", type=Path, default=DEFAULT_NEW, help="this awsflock's executable")
    parser.add_argument("--quick", action="store_true", help="fewer repeats, shorter waits")
    parser.add_argument("--list-items", type=int, default=100_000)
    parser.add_argument(
        "--only-line", action="store_true", help="only the fair-waiting measures (and requests)"
    )
    args = parser.parse_args()
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
    rows: list[tuple[str, Any, Any, str]] = []
    line_rows: list[tuple[str, Any, Any, str]] = []

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

    print(f"awsflock benchmark, {results['date']}, {results['machine']}")
    print(f"{'measure':<58} {'new':>10} {'0.2.0':>10} {'new/old':>8}  unit")
    for label, a, b, unit in rows:
        ratio = f"{a / b:.2f}" if isinstance(b, (int, float)) and b else "-"
        b_text = f"{b:10.3f}" if isinstance(b, (int, float)) else f"{'-':>10}"
        print(f"{label:<58} {a:10.3f} {b_text} {ratio:>8}  {unit}")
    print(
        f"\n{'fair waiting (this awsflock)':<58} {'--fair':>10} {'unfair':>10} {'fair/un':>8}  unit"
    )
    for label, a, b, unit in line_rows:
        ratio = f"{a / b:.2f}" if b else "-"
        print(f"{label:<58} {a:10.3f} {b:10.3f} {ratio:>8}  {unit}")
    out = ROOT / "bench-results"
    out.mkdir(exist_ok=True)
    path = out / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=2))
    print(f"written to {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
