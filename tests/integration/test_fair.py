"""Fair waiting (--fair) against real servers: order of arrival, lapsed places, leaving the
line, the line's hold on non-fair acquires, pools.

Waiters are real ``awsflock`` processes whose stderr goes to a file, so a test can wait until a
waiter says its place in line before the next one arrives: arrival order is then the order in
which the store handed out places, whatever the machine's load, and arrivals are still at least
``SPACING`` apart as the issue asks. Every wait is bounded.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import awsflock as library_module
from awsflock import LockTable
from awsflock.lock.telling import POLL_INTERVAL, POLL_JITTER
from awsflock.protocol import LINE_LAPSE_MS
from awsflock.stores.remote import worker
from tests.integration.conftest import BIN, Cli, UrlCli
from tests.servers import LOCAL_CREDENTIALS

#: These tests run on PostgreSQL too (see conftest.py).

#: Arrivals of fair waiters are at least this far apart.
SPACING = 1.0
#: How long each waiter of the order tests holds the lock.
HOLD = 0.3
#: The longest pause between two polls of a waiter (1.25 s).
LONGEST_POLL = POLL_INTERVAL * (1 + POLL_JITTER)
#: A place lapses once the waiters behind it saw it unchanged this long (3 s).
LAPSE = LINE_LAPSE_MS / 1000
#: Room for requests, process start and exit on a loaded two-core CI machine.
SLACK = 1.5
ORDINALS = ["1st", "2nd", "3rd", "4th", "5th", "6th"]


class Waiter:
    """One ``awsflock`` process, its stdout and stderr in files readable while it runs."""

    def __init__(self, cli: Cli, name: str, args: list[str], folder: Path, env: dict) -> None:
        self.name = name
        self.out = folder / f"{name}.out"
        self.err = folder / f"{name}.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                [str(BIN), *args],
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                text=True,
                env=cli.env(**env),
            )

    def stderr(self) -> str:
        return self.err.read_text()

    def stdout(self) -> str:
        return self.out.read_text()

    def wait_in_line(self, timeout: float = 30.0) -> str:
        """Bounded wait until the waiter says its place; returns that first line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = [line for line in self.stderr().splitlines() if " in line for " in line]
            if lines:
                return lines[0]
            assert self.proc.poll() is None, f"{self.name} exited: {self.stderr()}"
            time.sleep(0.05)
        raise AssertionError(f"{self.name} never said its place in line: {self.stderr()}")

    def wait(self, timeout: float = 60.0) -> int:
        """Bounded wait for the process to end; its exit status."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running: {self.stderr()}") from None

    def events(self, event: str) -> list[dict]:
        """The waiter's JSON stderr events (``--log-format json``) of one kind."""
        found = [json.loads(line) for line in self.stderr().splitlines() if line.startswith("{")]
        return [e for e in found if e.get("event") == event]


Spawn = Callable[..., Waiter]


@pytest.fixture
def spawn(awsflock: Cli, tmp_path: Path) -> Iterator[Spawn]:
    """Starts waiters; any still running when the test ends are killed (by their own pid)."""
    started: list[Waiter] = []

    def start(name: str, *args: str, **env: str) -> Waiter:
        waiter = Waiter(awsflock, name, list(args), tmp_path, env)
        started.append(waiter)
        return waiter

    yield start
    for waiter in started:
        if waiter.proc.poll() is None:
            waiter.proc.kill()
            waiter.proc.wait(timeout=10)


@pytest.fixture
def library(awsflock: Cli, monkeypatch: pytest.MonkeyPatch) -> Iterator[LockTable]:
    """The CLI's store and table through the library, for a step that must not wait for a
    process to start (DynamoDB Local keeps tables per access key: the CLI's loopback key).
    Its tries wait to be sent as long as a loaded machine takes (CI once gave one up after
    5.2 s unsent): the probes' own answers say whether they came too late."""
    for name, value in LOCAL_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(worker, "TRY_GRACE", 300.0)
    if isinstance(awsflock, UrlCli):
        table = library_module.connect(awsflock.url, table=awsflock.table)
    else:
        table = library_module.connect(
            f"dynamodb://{awsflock.table}", endpoint_url=awsflock.endpoint, region="us-east-1"
        )
    with table:
        yield table


def arrive(
    spawn: Spawn, names: list[str], args: Callable[[str], list[str]], **env: str
) -> list[Waiter]:
    """Start one waiter per name, each once the one before is in line and at least SPACING
    after it started."""
    waiters = []
    for i, name in enumerate(names):
        started = time.monotonic()
        waiter = spawn(name, *args(name), **env)
        waiter.wait_in_line()
        waiters.append(waiter)
        if i < len(names) - 1:
            time.sleep(max(0.0, started + SPACING - time.monotonic()))
    return waiters


def hold(cli: Cli, locks: list[str], *args: str) -> list[dict]:
    """Plain holders (not fair), one per entry of ``locks``, all acquired at once."""
    procs = [
        cli.popen("acquire", lock, "--owner", "holder", "--json", "--wait-time", "20", *args)
        for lock in locks
    ]
    leases = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        leases.append(json.loads(out))
    return leases


def release(cli: Cli, lock: str, *lease_ids: str) -> None:
    """Release these leases of ``lock``, all at once."""
    release_all(cli, [(lock, lease_id) for lease_id in lease_ids])


def release_all(cli: Cli, leases: list[tuple[str, str]]) -> None:
    """Release these (lock, LEASE_ID) pairs, all at once."""
    procs = [cli.popen("release", lock, lease_id) for lock, lease_id in leases]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err


def line_of(cli: Cli, lock: str) -> list[dict]:
    result = cli("status", lock, "--json")
    assert result.returncode in (0, 3), result.stderr  # 3: free
    return json.loads(result.stdout).get("line", [])


def said_place(line: str, lock: str, i: int, ahead: list[str]) -> bool:
    """``line`` is waiter i's first "Nth in line" message, with the holder and ``ahead``."""
    waiting = f", {len(ahead)} waiting: {', '.join(ahead)}" if ahead else ""
    pattern = (
        rf"awsflock: {ORDINALS[i]} in line for '{re.escape(lock)}' "
        rf"\(ahead: holder holding since \d\d:\d\d:\d\d{re.escape(waiting)}\)"
    )
    return re.fullmatch(pattern, line) is not None


class Round:
    """A holder holds ``lock``; five ``run --fair`` (or AWSFLOCK_FAIR=1) waiters arrive SPACING
    apart, each writing its name and fencing token to a file when it gets the lock, holding it
    HOLD s and exiting with a status of its own, which ``run`` must pass through."""

    def __init__(self, cli: Cli, spawn: Spawn, lock: str, number: int, folder: Path) -> None:
        self.cli, self.spawn, self.lock = cli, spawn, lock
        self.names = [f"r{number}w{i}" for i in range(5)]
        self.statuses = {name: 10 * number + i for i, name in enumerate(self.names)}
        self.order = folder / f"order-{number}"
        # Odd rounds ask for fair waiting through the environment, even ones with --fair.
        self.fair_env = {"AWSFLOCK_FAIR": "1"} if number % 2 else {}
        self.fair_args = [] if number % 2 else ["--fair"]
        self.waiters: list[Waiter] = []
        self.holder: dict = {}

    def args(self, name: str) -> list[str]:
        script = (
            f"echo {name} $AWSFLOCK_FENCING_TOKEN >> {shlex.quote(str(self.order))}; "
            f"sleep {HOLD}; exit {self.statuses[name]}"
        )
        options = [*self.fair_args, "--owner", name, "--wait-time", "60"]
        return ["run", self.lock, *options, "--", "sh", "-c", script]

    def check_places(self) -> None:
        for i, waiter in enumerate(self.waiters):
            first = waiter.wait_in_line()
            assert said_place(first, self.lock, i, self.names[:i]), first

    def check(self) -> None:
        for waiter in self.waiters:
            assert waiter.wait() == self.statuses[waiter.name], waiter.stderr()
            assert waiter.stdout() == ""
        grants = [line.split() for line in self.order.read_text().splitlines()]
        assert [name for name, _ in grants] == self.names
        tokens = [self.holder["fencing_token"]] + [int(token) for _, token in grants]
        assert tokens == sorted(set(tokens)), tokens


def arrive_together(rounds: list[Round]) -> None:
    """The rounds' waiters arrive side by side: the i-th of each, then SPACING later the next."""
    for i in range(5):
        started = time.monotonic()
        for r in rounds:
            r.waiters.append(r.spawn(r.names[i], *r.args(r.names[i]), **r.fair_env))
        for r in rounds:
            r.waiters[i].wait_in_line()
        if i < 4:
            time.sleep(max(0.0, started + SPACING - time.monotonic()))


def test_five_fair_waiters_are_served_in_order_of_arrival_five_rounds_running(
    awsflock: Cli, lock_name, spawn, tmp_path
):
    # To keep this quick, rounds go in groups on locks of their own: one group's waiters arrive
    # while the group before is served.
    serving: list[Round] = []
    for group in ([0, 1, 2], [3, 4]):
        rounds = [
            Round(awsflock, spawn, f"{lock_name}-{number}", number, tmp_path) for number in group
        ]
        for r, holder in zip(rounds, hold(awsflock, [r.lock for r in rounds])):
            r.holder = holder
        arrive_together(rounds)
        for r in rounds:
            r.check_places()
        for r in serving:
            r.check()
        release_all(awsflock, [(r.lock, r.holder["lease_id"]) for r in rounds])
        serving = rounds
    for r in serving:
        r.check()
    assert line_of(awsflock, serving[-1].lock) == []


def test_a_killed_waiter_in_the_middle_of_the_line_is_passed_over(awsflock: Cli, lock_name, spawn):
    (holder,) = hold(awsflock, [lock_name])
    first, killed, third = arrive(
        spawn,
        ["first", "killed", "third"],
        lambda name: ["acquire", lock_name, "--fair", "--owner", name, "--log-format", "json"],
    )
    killed.proc.send_signal(signal.SIGKILL)
    killed_at = time.time()
    release(awsflock, lock_name, holder["lease_id"])
    assert first.wait(timeout=20) == 0, first.stderr()
    release(awsflock, lock_name, first.stdout().strip())
    assert third.wait(timeout=30) == 0, third.stderr()
    (acquired,) = third.events("acquired")
    waited = acquired["ts"] - killed_at
    # The bound, from the kill to the third's grant: the killed waiter's last poll was at most
    # one poll (LONGEST_POLL) before the kill; the third first saw that poll at its own next
    # one (<= LONGEST_POLL later: the lapse starts there, as the waiters behind judge a place by
    # watching it not change), counted LAPSE of its monotonic time, and dropped the place with
    # the poll after (<= LONGEST_POLL), taking the lock right behind it. So LAPSE plus two polls
    # (5.5 s), plus SLACK for its requests. The first waiter was served well before that.
    bound = LAPSE + 2 * LONGEST_POLL + SLACK
    assert waited <= bound, f"passed over {waited:.2f}s after the kill (bound {bound}s)"
    # Nor was it dropped early: its last poll came at most one poll before the kill.
    assert waited >= LAPSE - LONGEST_POLL - 0.25, f"dropped {waited:.2f}s after the kill"
    assert line_of(awsflock, lock_name) == []
    lease_id = third.stdout().strip()
    assert third.stdout() == lease_id + "\n"
    release(awsflock, lock_name, lease_id)


@pytest.mark.one_server_per_kind("leaving the line on a signal or a wait that runs out")
def test_a_waiter_that_gives_up_leaves_the_line_at_once(awsflock: Cli, lock_name, spawn, tmp_path):
    (holder,) = hold(awsflock, [lock_name])
    marker = tmp_path / "ran"
    commands = {
        "patient": ["acquire", "--wait-time", "60"],
        "impatient": ["acquire", "--wait-time", "3"],
        "signalled": ["run", "--wait-time", "60", "--", "touch", str(marker)],
    }
    # Others remove a place only 3 s after its waiter's last poll, so a place that is gone as
    # soon as its waiter exits was given up by that waiter itself.
    patient, impatient, signalled = arrive(
        spawn,
        list(commands),
        lambda name: [commands[name][0], lock_name, "--fair", "--owner", name, *commands[name][1:]],
    )
    # A signal: `run` stops waiting, leaves the line, never starts the command.
    signalled.proc.send_signal(signal.SIGTERM)
    assert signalled.wait(timeout=20) == 128 + signal.SIGTERM
    assert "not started" in signalled.stderr() and not marker.exists()
    assert "signalled" not in [place["owner"] for place in line_of(awsflock, lock_name)]
    # --wait-time runs out: exit 3, and the place is gone when it says so.
    assert impatient.wait(timeout=20) == 3
    assert "is held by holder" in impatient.stderr() and "gave up after" in impatient.stderr()
    assert impatient.stdout() == ""
    line = line_of(awsflock, lock_name)
    assert [place["owner"] for place in line] == ["patient"], line
    # acquire --fair prints exactly one line on stdout, the LEASE_ID; its place went to stderr.
    release(awsflock, lock_name, holder["lease_id"])
    assert patient.wait(timeout=20) == 0, patient.stderr()
    lease_id = patient.stdout().strip()
    assert patient.stdout() == lease_id + "\n" and " " not in lease_id
    assert "1st in line for" in patient.stderr() and lease_id not in patient.stderr()
    release(awsflock, lock_name, lease_id)


def _finished(proc: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.one_server_per_kind("what --no-wait says on a free lock with a line")
def test_no_wait_on_a_free_lock_with_a_line_is_busy_and_says_how_many_wait(
    awsflock: Cli, lock_name, spawn, library: LockTable
):
    # Stopped waiters keep their places only until those lapse, LAPSE after their last polls;
    # on a loaded machine the probes can come later. The probes' own answers say whether the
    # places were live when they looked: one that took the lock saw them lapsed, and the round
    # proves nothing. It is then played again on a new lock, five times at most.
    for attempt in range(5):
        found = _probe_a_free_lock_with_a_line(
            awsflock, library, f"{lock_name}-{attempt}", spawn, attempt
        )
        if found is not None:
            break
    else:
        pytest.fail("five times, the waiters' places lapsed before the probes were over")
    name, busy, run_busy, waiters = found
    status = awsflock("status", name, "--json")
    waiters[0].proc.send_signal(signal.SIGCONT)  # the head: once resumed it takes the lock
    assert busy.returncode == 3, busy.stderr
    assert busy.stdout == ""
    assert "is free, but 2 waiters are in line for it (--fair)" in busy.stderr
    assert (run_busy.returncode, run_busy.stdout) == (75, "")
    assert "is free, but 2 waiters are in line" in run_busy.stderr
    assert status.returncode == 3, status.stderr
    data = json.loads(status.stdout)  # the places may have lapsed since: they are still shown
    assert data["state"] == "free" and [p["owner"] for p in data["line"]] == ["ana", "bo"]
    assert waiters[0].wait(timeout=20) == 0, waiters[0].stderr()
    waiters[1].proc.send_signal(signal.SIGCONT)
    release(awsflock, name, waiters[0].stdout().strip())
    assert waiters[1].wait(timeout=20) == 0, waiters[1].stderr()
    release(awsflock, name, waiters[1].stdout().strip())


def _probe_a_free_lock_with_a_line(
    awsflock: Cli, library: LockTable, name: str, spawn, attempt: int
):
    """Two fair waiters in line behind a holder, stopped; the holder releases (through the
    library: no process start between the stop and the probes); then an ``acquire --no-wait``
    and a ``run --no-wait`` side by side. None (all stopped and cleaned up) if a probe took the
    lock: it came after the places lapsed."""
    (holder,) = hold(awsflock, [name])
    waiters = arrive(
        spawn,
        [f"ana-{attempt}", f"bo-{attempt}"],
        lambda who: ["acquire", name, "--fair", "--owner", who.split("-")[0]],
    )
    # Stopped, they keep their places (polled within the lapse plus skew) but cannot take the
    # lock when it is released: it is free, with a live line.
    for waiter in waiters:
        waiter.proc.send_signal(signal.SIGSTOP)
    try:
        library.release_lease(name, holder["lease_id"])
        procs = [
            awsflock.popen("acquire", name, "--no-wait"),
            awsflock.popen("run", name, "--no-wait", "--", "echo", "ran"),
        ]
        busy, run_busy = (_finished(proc) for proc in procs)
    except BaseException:
        for waiter in waiters:
            waiter.proc.kill()
        raise
    if busy.returncode != 0 and run_busy.returncode != 0:
        return name, busy, run_busy, waiters
    for waiter in waiters:
        waiter.proc.kill()
        waiter.proc.wait(timeout=20)
    if busy.returncode == 0:  # taken once the places had lapsed
        release(awsflock, name, busy.stdout.strip())
    return None


def test_a_pool_of_two_serves_six_fair_waiters_in_order(awsflock: Cli, lock_name, spawn):
    holders = hold(awsflock, [lock_name, lock_name], "--slots", "2")
    names = [f"w{i}" for i in range(6)]
    waiters = arrive(
        spawn,
        names,
        lambda name: [
            *("acquire", lock_name, "--slots", "2", "--fair", "--owner", name, "--json"),
            *("--log-format", "json", "--wait-time", "60"),
        ],
    )
    for i, waiter in enumerate(waiters):
        (place, *_) = waiter.events("in_line")
        assert place["position"] == i + 1 and place["ahead"] == names[:i], place
    release(awsflock, lock_name, *(holder["lease_id"] for holder in holders))
    grants, live = [], []
    for waiter in waiters:
        if len(live) == 2:  # both slots held: the oldest's slot goes to the next in line
            release(awsflock, lock_name, live.pop(0))
        assert waiter.wait() == 0, waiter.stderr()
        lease = json.loads(waiter.stdout())
        grants.append((lease["acquired_at"], waiter.name, lease["slot"]))
        live.append(lease["lease_id"])
    release(awsflock, lock_name, *live)
    # A waiter takes a slot only at the head of the line, so only once it has seen the one
    # before it take (whose place left the line in that write): the times the leases began,
    # as the store wrote them, are in grant order. (Not the times the waiters logged their
    # grants: the next waiter, woken by the take, may take and log its own before a waiter
    # descheduled on a loaded machine logs the one it took first. Nor the fencing tokens:
    # each slot counts its own.)
    assert [name for _, name, _ in sorted(grants)] == names, sorted(grants)
    # The first two were granted with both slots free and none released: one each.
    assert {slot for _, _, slot in grants[:2]} == {0, 1}, grants
    assert line_of(awsflock, lock_name) == []


@pytest.mark.one_server_per_kind("what the command does on TERM and HUP while it waits in line")
def test_an_acquire_stopped_by_term_or_hup_gives_up_its_place_at_once(
    awsflock: Cli, lock_name, spawn
):
    (holder,) = hold(awsflock, [lock_name])
    first, term, hup = arrive(
        spawn,
        ["first", "term", "hup"],
        lambda name: ["acquire", lock_name, "--fair", "--owner", name, "--wait-time", "60"],
    )
    for waiter, sig in ((term, signal.SIGTERM), (hup, signal.SIGHUP)):
        waiter.proc.send_signal(sig)
        assert waiter.wait(timeout=20) == 128 + sig
        said = waiter.stderr().splitlines()[-1]
        assert said == (
            f"awsflock: warning: interrupted by signal {int(sig)} while waiting for "
            f"'{lock_name}'; nothing is held and the place in line was given up"
        )
        assert waiter.stdout() == ""
        assert waiter.name not in [place["owner"] for place in line_of(awsflock, lock_name)]
    release(awsflock, lock_name, holder["lease_id"])
    assert first.wait(timeout=20) == 0, first.stderr()
    release(awsflock, lock_name, first.stdout().strip())


@pytest.mark.needs("dynamodb_api", "it writes the dead places with the DynamoDB store itself")
def test_a_burst_of_dead_places_does_not_stop_a_fair_waiter(awsflock: Cli, lock_name, spawn):
    # 100 places whose waiters never poll (a cancelled batch of jobs), written straight into
    # the record. A fair waiter behind them removes them a bounded number per write: a single
    # write removing all of them would exceed DynamoDB's 4 KB expression limit (DynamoDB Local
    # enforces it; moto answers such a request with an HTTP 500; dynalite accepts it).
    from awsflock.records import Identity
    from awsflock.records import Waiter as Place
    from awsflock.stores.dynamodb import DynamoDBStore
    from tests.servers import local_client

    (holder,) = hold(awsflock, [lock_name])
    store = DynamoDBStore(awsflock.table, local_client(awsflock.endpoint))
    now_ms = round(time.time() * 1000)
    for n in range(100):
        place = Place(f"{n:016x}", 0, Identity(owner=f"dead-{n}"), now_ms, now_ms)
        assert store.join(lock_name, place).applied
    (live,) = arrive(
        spawn, ["live"], lambda name: ["acquire", lock_name, "--fair", "--owner", name]
    )
    assert "101st in line" in live.wait_in_line() and "and 95 more" in live.wait_in_line()
    # Lapse (3 s) plus a poll or two, then five polls removing at most 20 places each.
    deadline = time.monotonic() + LAPSE + 7 * LONGEST_POLL + 2 * SLACK
    while [p["owner"] for p in line_of(awsflock, lock_name)] != ["live"]:
        assert time.monotonic() < deadline, line_of(awsflock, lock_name)
        time.sleep(0.2)
    release(awsflock, lock_name, holder["lease_id"])
    assert live.wait(timeout=20) == 0, live.stderr()
    assert line_of(awsflock, lock_name) == []
    release(awsflock, lock_name, live.stdout().strip())
