"""``acquire --keep-alive`` against real servers: scripts and CI jobs as they really run it.

Each script is a real shell (``sh -c``) that runs the real ``awsflock`` in ``$(...)``; a job is
a parent process running its steps as separate shells, and killing what is left at its end as a
CI runner does. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faultproxy import FaultProxy
from tests.integration.conftest import BIN, Cli, gone

pytestmark = pytest.mark.one_server_per_kind(
    "the keep-alive renewer's life beside the script that started it"
)

LEASE = 6.0
SKEW = 5.0
#: Room for process start-up and requests on a loaded two-core CI machine.
SLACK = 3.0

#: These tests run on PostgreSQL too (see conftest.py).


def shell(cli: Cli, script: str, **env: str) -> subprocess.Popen[str]:
    """A script in its own shell, with awsflock on its PATH."""
    path = f"{BIN.parent}:{os.environ.get('PATH', '')}"
    return subprocess.Popen(
        ["sh", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=cli.env(PATH=path, **env),
        start_new_session=True,  # so that the whole script can be killed, children included
    )


def run_script(cli: Cli, script: str, shell_name: str = "sh") -> subprocess.CompletedProcess[str]:
    """Run a script to its end, with awsflock on its PATH."""
    return subprocess.run(
        [shell_name, "-c", script],
        capture_output=True,
        text=True,
        env=cli.env(PATH=f"{BIN.parent}:{os.environ.get('PATH', '')}"),
        timeout=60,
    )


def status(cli: Cli, lock: str) -> dict:
    result = cli("status", lock, "--json")
    assert result.returncode in (0, 3), result.stderr
    return json.loads(result.stdout)


def renewer_pid(cli: Cli, lock: str, timeout: float = 20.0) -> int:
    """The pid of the lease's renewer, as ``status`` shows it (bounded wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        keeper = status(cli, lock).get("kept_alive_by") or ""
        if "pid " in keeper:
            return int(keeper.split("pid ")[1].split(",")[0])
        time.sleep(0.1)
    raise AssertionError(f"no keeper shown for {lock!r}: {status(cli, lock)}")


def contender_gets_it(cli: Cli, lock: str, wait: float) -> float:
    """Seconds until a plain acquire waiting up to ``wait`` gets the lock."""
    start = time.monotonic()
    result = cli("acquire", lock, "--owner", "contender", "--wait-time", str(wait))
    assert result.returncode == 0, result.stderr
    cli("release", lock, result.stdout.strip())
    return time.monotonic() - start


def test_a_script_keeps_a_short_lease_across_renewals_and_releases(awsflock: Cli, lock_name):
    # Timed from before the script starts: its release comes at least 17 s after this, however
    # long the renewer took to show (a start taken later let a try fall after the release).
    start = time.monotonic()
    script = shell(
        awsflock,
        f"LEASE_ID=$(awsflock acquire {lock_name} --keep-alive --lease-duration 6s) || exit 9\n"
        "echo $LEASE_ID\n"
        "sleep 17\n"
        f'awsflock release {lock_name} "$LEASE_ID"\n',
    )
    pid = renewer_pid(awsflock, lock_name)
    refused: list[float] = []
    ends: set[str] = set()
    while script.poll() is None and time.monotonic() - start < 90:
        # A contender that does not wait never gets it while the script runs, however slow the
        # machine: only the renewer keeps the lease past its first 6 s. (Conditions, not
        # counts: how many tries fit in the time depends on the machine's load.)
        tried = time.monotonic() - start
        if tried < 15.5:
            busy = awsflock("acquire", lock_name, "--no-wait", "--owner", "contender")
            assert busy.returncode == 3, busy.stdout + busy.stderr
            refused.append(tried)
            ends.add(status(awsflock, lock_name)["expires_at"])
        time.sleep(0.5)
    _, err = script.communicate(timeout=30)
    assert script.returncode == 0, err
    assert err == ""
    # Refused after the first lease and its skew window: only renewals explain it; and the
    # lease's end moved on, renewal after renewal (every 2 s; seen at least twice).
    assert max(refused) >= LEASE + SKEW + 1, refused
    assert len(ends) >= 3, ends
    assert gone(pid), "the renewer is still running after release"
    assert status(awsflock, lock_name)["state"] == "free"


def test_a_lock_whose_name_starts_with_a_dash_is_kept_alive(awsflock: Cli, lock_name):
    # The renewer was started with the name before its options, so "-x" read as an option and
    # `acquire --keep-alive -- -x` failed saying the renewer did not start.
    name = "-" + lock_name
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        got = awsflock("acquire", "--keep-alive", "--while-pid", str(sleeper.pid), "--", name)
        assert got.returncode == 0, got.stderr
        assert "following pid" in awsflock("status", "--json", "--", name).stdout
        assert awsflock("release", "--", name, got.stdout.strip()).returncode == 0
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_killed_script_frees_the_lock_at_once(awsflock: Cli, lock_name):
    script = shell(
        awsflock,
        f"LEASE_ID=$(awsflock acquire {lock_name} --keep-alive --lease-duration 6s) || exit 9\n"
        "sleep 120\n",
    )
    pid = renewer_pid(awsflock, lock_name)
    os.killpg(script.pid, signal.SIGKILL)  # the script and its children; not the renewer
    script.communicate(timeout=10)
    # The renewer sees the shell go and ends the lease itself: the lock turns free, never
    # "expired" (which a lease left to run out would show first), whatever the machine's load.
    deadline = time.monotonic() + LEASE + SKEW + SLACK
    state = status(awsflock, lock_name)["state"]
    while state == "held" and time.monotonic() < deadline:
        time.sleep(0.2)
        state = status(awsflock, lock_name)["state"]
    assert state == "free", f"the renewer did not end the lease: the lock is {state}"
    took = contender_gets_it(awsflock, lock_name, LEASE + SKEW + SLACK)
    assert took < LEASE + SKEW + SLACK
    assert gone(pid)


def test_a_lease_the_renewer_ended_is_not_held_for_its_release(awsflock: Cli, lock_name):
    result = run_script(awsflock, f'L=$(awsflock acquire {lock_name} --keep-alive); echo "$L"')
    lease_id = result.stdout.strip()
    deadline = time.monotonic() + 10
    while status(awsflock, lock_name)["state"] != "free":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    late = awsflock("release", lock_name, lease_id)
    assert late.returncode == 3
    assert (
        "awsflock keep-alive" in late.stderr
        and "for which it was kept alive, exited" in late.stderr
    )


@pytest.mark.one_server("the shell's and the wrapper's processes, not the store")
@pytest.mark.parametrize(
    "form",
    [
        "L=$(awsflock acquire {lock} --keep-alive --lease-duration 6s 2>/dev/null)",
        "L=$(timeout 60 awsflock acquire {lock} --keep-alive --lease-duration 6s)",
        "L=$(awsflock acquire {lock} --keep-alive --lease-duration 6s)",
    ],
)
def test_bash_keeps_the_lock_whatever_runs_in_the_substitution(awsflock: Cli, lock_name, form):
    # bash runs $(cmd 2>/dev/null) in a forked subshell, and timeout is a process of its own:
    # the renewer follows the script's shell (the reader of the output), not those.
    script = run_script(
        awsflock,
        form.format(lock=lock_name)
        + f'\nsleep 8\nawsflock status {lock_name} --json\nawsflock release {lock_name} "$L"',
        "bash",
    )
    assert script.returncode == 0, script.stderr
    assert json.loads(script.stdout)["state"] == "held"


def test_too_short_a_lease_or_an_impossible_pid_is_a_usage_error(awsflock: Cli, lock_name):
    short = awsflock("acquire", lock_name, "--keep-alive", "--lease-duration", "1s")
    assert short.returncode == 2 and "too short to be renewed" in short.stderr
    huge = awsflock("acquire", lock_name, "--while-pid", "99999999999999999999")
    assert huge.returncode == 2 and "Traceback" not in huge.stderr
    assert status(awsflock, lock_name)["state"] == "free"


def test_a_shorter_renew_does_not_let_a_kept_lease_run_out(awsflock: Cli, lock_name):
    taken = awsflock(
        "acquire", lock_name, "--while-pid", str(os.getpid()), "--lease-duration", "30s"
    )
    assert taken.returncode == 0, taken.stderr
    lease_id = taken.stdout.strip()
    assert awsflock("renew", lock_name, lease_id, "--lease-duration", "5s").returncode == 0
    # The renewer renews at once with its own 30 s, not at its next turn (10 s away).
    deadline = time.monotonic() + 5
    while status(awsflock, lock_name).get("lease_duration_s") != 30.0:
        assert time.monotonic() < deadline, status(awsflock, lock_name)
        time.sleep(0.1)
    assert awsflock("release", lock_name, lease_id).returncode == 0


def test_a_longer_renew_of_a_kept_lease_is_cut_back_to_the_renewers_length(
    awsflock: Cli, lock_name
):
    # A kept-alive lease is meant to lapse soon after its renewer is gone. The renewer's cut-back
    # is a shorter renew, applied once the two renews' readings are a skew window apart (closer
    # renews cannot be ordered): found refused and never tried again by the fourth review.
    taken = awsflock(
        "acquire", lock_name, "--while-pid", str(os.getpid()), "--lease-duration", "60s"
    )
    assert taken.returncode == 0, taken.stderr
    lease_id = taken.stdout.strip()
    assert awsflock("renew", lock_name, lease_id, "--lease-duration", "10m").returncode == 0
    # Well before the renewer's next scheduled renewal (a third of 60 s after its first).
    deadline = time.monotonic() + 12
    while status(awsflock, lock_name)["expires_in_s"] > 61:
        assert time.monotonic() < deadline, status(awsflock, lock_name)
        time.sleep(0.5)
    assert awsflock("release", lock_name, lease_id).returncode == 0


def test_release_stops_the_renewer_and_leaves_nothing(awsflock: Cli, lock_name):
    result = run_script(
        awsflock, f'L=$(awsflock acquire {lock_name} --keep-alive); echo "$L"; sleep 2'
    )
    lease_id = result.stdout.strip()
    # The followed shell has exited: the renewer released the lease by itself.
    assert result.returncode == 0 and lease_id, result.stderr
    deadline = time.monotonic() + 10
    while status(awsflock, lock_name)["state"] != "free":
        assert time.monotonic() < deadline, status(awsflock, lock_name)
        time.sleep(0.1)
    # Now with `release`, following this test process (which lives on).
    taken = awsflock("acquire", lock_name, "--keep-alive", "--while-pid", str(os.getpid()))
    assert taken.returncode == 0, taken.stderr
    lease_id = taken.stdout.strip()
    pid = renewer_pid(awsflock, lock_name)
    data = status(awsflock, lock_name)
    assert data["lease_duration_s"] == 60.0  # the keep-alive default
    assert f"following pid {os.getpid()}" in data["kept_alive_by"]
    released = awsflock("release", lock_name, lease_id)
    assert (released.returncode, released.stdout, released.stderr) == (0, "", "")
    assert gone(pid, timeout=3.0)
    runtime = Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp") / f"awsflock-{os.getuid()}"
    assert not list(runtime.glob(f"keepalive-{lease_id}*"))
    assert status(awsflock, lock_name)["state"] == "free"


def test_a_set_is_kept_alive_whole_and_released_whole(awsflock: Cli, lock_name):
    # Several names taken together, kept alive by one renewer: renewed together past their
    # first lease, stopped by the set's release, which frees every name.
    a, b = f"{lock_name}-a", f"{lock_name}-b"
    taken = awsflock(
        "acquire", a, b, "--keep-alive", "--while-pid", str(os.getpid()),
        "--lease-duration", "6s", "--json",
    )  # fmt: skip
    assert taken.returncode == 0, taken.stderr
    lease_id = json.loads(taken.stdout)["lease_id"]
    pid = renewer_pid(awsflock, b)
    assert renewer_pid(awsflock, a) == pid  # one renewer keeps both
    first_end = status(awsflock, b)["expires_at"]
    deadline = time.monotonic() + LEASE + SKEW + SLACK
    while status(awsflock, b)["expires_at"] == first_end:
        assert time.monotonic() < deadline, "the set was not renewed"
        time.sleep(0.2)
    assert awsflock("acquire", b, "--no-wait").returncode == 3
    released = awsflock("release", b, a, lease_id)  # the names in any order
    assert (released.returncode, released.stderr) == (0, ""), released.stderr
    assert gone(pid, timeout=3.0)
    assert [status(awsflock, n)["state"] for n in (a, b)] == ["free", "free"]


def test_a_killed_script_frees_every_name_of_its_set(awsflock: Cli, lock_name):
    a, b = f"{lock_name}-a", f"{lock_name}-b"
    script = shell(
        awsflock,
        f"LEASE_ID=$(awsflock acquire {a} {b} --keep-alive --lease-duration 6s) || exit 9\n"
        "echo $LEASE_ID\n"
        "sleep 120\n",
    )
    pid = renewer_pid(awsflock, a)
    lease_id = script.stdout.readline().strip() if script.stdout else ""
    os.killpg(script.pid, signal.SIGKILL)  # the script and its children; not the renewer
    script.communicate(timeout=10)
    # The renewer ends each name's lease itself: both turn free, never "expired".
    deadline = time.monotonic() + LEASE + SKEW + SLACK
    states = [status(awsflock, n)["state"] for n in (a, b)]
    while states != ["free", "free"] and time.monotonic() < deadline:
        assert "expired" not in states, states
        time.sleep(0.2)
        states = [status(awsflock, n)["state"] for n in (a, b)]
    assert states == ["free", "free"], f"the renewer did not end the set: {states}"
    assert gone(pid)
    late = awsflock("release", a, b, lease_id)  # as a script's own release would be told
    assert late.returncode == 3 and "force-released by" in late.stderr, late.stderr


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_force_release_is_told_to_the_script_and_to_its_release(awsflock: Cli, lock_name, fmt):
    acquire = f"awsflock acquire {lock_name} --keep-alive --lease-duration 6s --log-format {fmt}"
    script = shell(
        awsflock,
        f"LEASE_ID=$({acquire}) || exit 9\n"
        # Wait while it is held (until the operator forced it), then for the renewer to notice
        # at its next renewal (every 2 s).
        f"i=0; while [ $i -lt 100 ] && awsflock status {lock_name} >/dev/null; do"
        " sleep 0.2; i=$((i+1)); done\n"
        "sleep 3\n"
        f'awsflock release {lock_name} "$LEASE_ID"\n'
        "echo release=$?\n",
    )
    pid = renewer_pid(awsflock, lock_name)
    forced = awsflock("force-release", lock_name, "--yes", "--reason", "stuck deploy")
    assert forced.returncode == 0, forced.stderr
    out, err = script.communicate(timeout=60)
    assert "release=3" in out
    assert "force-released by" in err and "stuck deploy" in err
    # The renewer wrote the loss to the script's stderr before it went, in the acquire's log
    # format (third review: it was text under --log-format json).
    told = f"the lock '{lock_name}' kept alive for this process was lost"
    if fmt == "json":
        (lost,) = [json.loads(x) for x in err.splitlines() if x.startswith("{") and told in x]
        assert lost["event"] == "lost" and lost["lock_id"] == lock_name, lost
    else:
        assert told in err
    assert gone(pid)


@pytest.mark.one_server("the shell's and the wrapper's processes, not the store")
def test_the_renewer_never_holds_the_callers_output_open(awsflock: Cli, lock_name):
    # $(...) returns when its output closes: with a renewer holding it, it would never return.
    start = time.monotonic()
    result = subprocess.run(
        [str(BIN), "acquire", lock_name, "--keep-alive", "--while-pid", str(os.getpid())],
        capture_output=True,
        text=True,
        env=awsflock.env(),
        timeout=30,
    )
    took = time.monotonic() - start
    assert result.returncode == 0, result.stderr
    assert took < 10, f"acquire --keep-alive took {took:.1f}s"
    pid = renewer_pid(awsflock, lock_name)
    fds = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    assert not [fd for fd in fds if fd.startswith("pipe:")], fds
    assert os.readlink(f"/proc/{pid}/fd/1") == "/dev/null"
    # No terminal, a session of its own, and a small process's memory.
    stat = Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()
    assert stat[4] == "0" and int(stat[3]) == pid  # tty_nr, session id
    rss_kb = int(
        next(
            line
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("VmRSS")
        ).split()[1]
    )
    assert rss_kb < 80_000
    assert awsflock("release", lock_name, result.stdout.strip()).returncode == 0
    assert gone(pid)


def test_while_pid_of_no_process_is_a_usage_error(awsflock: Cli, lock_name):
    result = awsflock("acquire", lock_name, "--while-pid", "4194303")
    assert result.returncode == 2 and result.stdout == ""
    assert "there is no process 4194303" in result.stderr
    assert status(awsflock, lock_name)["state"] == "free"


@pytest.mark.one_server("the shell's and the wrapper's processes, not the store")
@pytest.mark.parametrize("wrapper", ["timeout 60", "flock {tmp}/f"])
def test_a_wrapper_between_the_script_and_acquire_does_not_end_the_lock(
    awsflock: Cli, lock_name, tmp_path, wrapper
):
    """Third review: under `timeout 60 awsflock acquire ... --keep-alive > FILE` the renewer
    followed `timeout`, which exits with acquire, and released at once. It follows the script."""
    lease = tmp_path / "lease"
    wrapper = wrapper.format(tmp=tmp_path)  # each a process that waits for its command
    script = shell(
        awsflock,
        f"{wrapper} awsflock acquire {lock_name} --keep-alive --lease-duration 6s > {lease}"
        " || exit 9\n"
        "sleep 9\n"  # past the 6 s lease: kept alive while the script runs
        f"awsflock status {lock_name} --json\n"
        f'awsflock release {lock_name} "$(cat {lease})"; echo release=$?\n',
    )
    out, err = script.communicate(timeout=60)
    assert script.returncode == 0, err
    during = json.loads(out.splitlines()[0])
    assert during["state"] == "held", (during, err)
    assert "release=0" in out, err


def test_store_on_the_command_line_wins_over_the_environment_for_the_renewer_too(
    server, awsflock: Cli, lock_name
):
    """Third review: `--store dynamodb://...` on the command line named the store for acquire,
    but the renewer inherited AWSFLOCK_STORE (here a PostgreSQL database that does not answer)
    and failed to start, or kept another store's lock."""
    url = f"dynamodb://{awsflock.table}?endpoint_url={awsflock.endpoint}"
    elsewhere = "postgresql://nobody@127.0.0.1:1/nowhere?connect_timeout=1"
    args = ("acquire", lock_name, "--keep-alive", "--while-pid", str(os.getpid()), "--store", url)
    result = awsflock(*args, AWSFLOCK_STORE=elsewhere)
    assert result.returncode == 0, result.stderr
    pid = renewer_pid(awsflock, lock_name)  # it renewed the lease on DynamoDB
    assert awsflock("release", lock_name, result.stdout.strip()).returncode == 0
    assert gone(pid)


def test_a_renewer_that_cannot_start_leaves_no_unnamed_lease(server, awsflock: Cli, used_lock_name):
    """Third review: when the renewer could not start, acquire gave the lease back, and if that
    failed too it said nothing: the lease stayed held, its LEASE_ID known to nobody. Here the
    endpoint throttles every write after the grant (the renewer's renewal, then the release)."""
    with FaultProxy(("127.0.0.1", server.port)) as proxy:
        proxy.plan = lambda target, n: "throttle" if target == "UpdateItem" and n > 1 else "pass"
        via = Cli(proxy.url, awsflock.table)
        result = via(
            "acquire", used_lock_name, "--keep-alive", "--while-pid", str(os.getpid()),
            "--request-timeout", "1s",
        )  # fmt: skip
    assert result.returncode == 1 and result.stdout == "", result.stderr
    assert "renewer could not start" in result.stderr
    named = re.search(rf"`awsflock release {used_lock_name} ([0-9a-f-]+)`", result.stderr)
    assert named, result.stderr
    assert awsflock("release", used_lock_name, named.group(1)).returncode == 0


@pytest.mark.one_server("the shell's and the wrapper's processes, not the store")
def test_the_lease_id_is_not_on_the_renewers_command_line(awsflock: Cli, lock_name):
    """Third review: the renewer's argv (which every local user reads in `ps`) carried the
    LEASE_ID, enough to renew or release someone else's lock."""
    result = awsflock("acquire", lock_name, "--keep-alive", "--while-pid", str(os.getpid()))
    assert result.returncode == 0, result.stderr
    lease_id = result.stdout.strip()
    pid = renewer_pid(awsflock, lock_name)
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert lease_id.encode() not in b" ".join(argv), argv
    assert awsflock("release", lock_name, lease_id).returncode == 0
    assert gone(pid)


def test_a_followed_process_gone_by_the_grant_gives_the_lease_back(awsflock: Cli, lock_name):
    """Third review: --while-pid was checked only before the wait; a process that exited while
    acquire waited got a LEASE_ID printed, exit 0, for a lease its renewer ended at once."""
    held = awsflock("acquire", lock_name, "--owner", "first")
    assert held.returncode == 0, held.stderr
    follow = subprocess.Popen(["sleep", "60"])
    waiting = awsflock.popen(
        "acquire", lock_name, "--while-pid", str(follow.pid), "--wait-time", "30"
    )
    try:
        # It is waiting once it says so (a fixed sleep failed on a loaded machine: the
        # process was gone before acquire had even read it).
        said = waiting.stderr.readline() if waiting.stderr else ""
        assert "waiting up to" in said, said
        follow.kill()
        follow.wait()
        assert awsflock("release", lock_name, held.stdout.strip()).returncode == 0
        out, err = waiting.communicate(timeout=60)
        err = said + err
    finally:
        follow.kill()
        follow.wait()
        waiting.kill()
    assert waiting.returncode == 1, (out, err)
    assert out == ""
    assert f"process {follow.pid}" in err and "given back" in err, err
    assert status(awsflock, lock_name)["state"] == "free"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_the_renewer_starts_never_leaves_an_unnamed_lease(
    awsflock: Cli, lock_name, sig
):
    """Third review: TERM or INT while the renewer started killed acquire with the lease held
    (and the renewer keeping it), and no LEASE_ID printed. Now the lease is given back, or
    (if the signal came once it was printed) the LEASE_ID stands and the release is named."""
    proc = awsflock.popen(
        "acquire", lock_name, "--keep-alive", "--while-pid", str(os.getpid()), "-v"
    )
    assert proc.stderr is not None
    fd, seen, deadline = proc.stderr.fileno(), b"", time.monotonic() + 30
    # The grant is logged (-v) before the renewer starts, which takes a while (it imports
    # the store's client): the signal falls in that window.
    while b"acquired" not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            seen += chunk
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    err = seen.decode() + err
    assert proc.returncode == 128 + sig, (out, err)
    if out.strip():  # printed: kept alive, and what frees it is named
        assert f"`awsflock release {lock_name} {out.strip()}`" in err, err
        assert awsflock("release", lock_name, out.strip()).returncode == 0
    else:
        assert "gave the lease back" in err or "gave it back" in err, err
    assert status(awsflock, lock_name)["state"] == "free"


# -- a CI job, as a runner runs it ---------------------------------------------------------------

RUNNER = r"""
import os, signal, subprocess, sys, time
steps, end = sys.argv[1:-1], sys.argv[-1]
for step in steps:
    code = subprocess.run(["sh", "-c", step]).returncode
    print(f"step exit {code}", flush=True)
if end == "die":
    os.kill(os.getpid(), signal.SIGKILL)  # the runner dies before any clean-up
"""


def job(cli: Cli, folder: Path, steps: list[str], end: str = "exit") -> subprocess.Popen[str]:
    """A CI job: one parent process runs each step in a shell of its own, in order (the
    steps' $PPID is the parent, as a GitHub Actions step's is the runner's worker)."""
    path = f"{BIN.parent}:{os.environ.get('PATH', '')}"
    return subprocess.Popen(
        [sys.executable, "-c", RUNNER, *steps, end],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=folder,
        env=cli.env(PATH=path),
        start_new_session=True,  # the job's processes: killed together when the runner dies
    )


def acquire_step(lock: str) -> str:
    # What the README's recipe does: keep it alive while the job (the runner) lives.
    acquire = f"awsflock acquire {lock} --keep-alive --while-pid $PPID --lease-duration 6s"
    return f'echo "$({acquire})" > lease'


def test_a_job_holds_one_lock_across_steps_and_releases_in_its_last_step(
    awsflock: Cli, lock_name, tmp_path
):
    steps = [
        acquire_step(lock_name),
        f"sleep 9; awsflock status {lock_name} --json > during.json",  # past the 6 s lease
        f'awsflock release {lock_name} "$(cat lease)"',
    ]
    runner = job(awsflock, tmp_path, steps)
    out, err = runner.communicate(timeout=90)
    assert out.splitlines() == ["step exit 0"] * 3, err
    during = json.loads((tmp_path / "during.json").read_text())
    assert during["state"] == "held" and "following pid" in during["kept_alive_by"]
    assert status(awsflock, lock_name)["state"] == "free"


@pytest.mark.parametrize("end", ["exit", "die"])
def test_a_job_that_never_runs_its_last_step_frees_the_lock(
    awsflock: Cli, lock_name, tmp_path, end
):
    # "exit": cancelled, the final step skipped, the runner exits: the renewer sees it go and
    # releases at once. "die": the runner is killed and, like a runner's clean-up of orphans
    # or a lost machine, the renewer with it: the lease lapses within lease + skew.
    # "exit": the job ends once the test has seen the renewer (a fixed "sleep 2" ended it
    # before status could show the keeper on a loaded machine), or after 60 s.
    wait_for_go = "for i in $(seq 600); do [ -e go ] && break; sleep 0.1; done"
    steps = [acquire_step(lock_name), "sleep 120" if end == "die" else wait_for_go]
    runner = job(awsflock, tmp_path, steps, end)
    pid = renewer_pid(awsflock, lock_name)
    (tmp_path / "go").touch()
    if end == "die":
        os.kill(pid, signal.SIGKILL)
        os.killpg(runner.pid, signal.SIGKILL)
    runner.communicate(timeout=30)
    took = contender_gets_it(awsflock, lock_name, LEASE + SKEW + 2 * SLACK)
    # "exit": the release comes at once, so the wait is the contender's own start and poll
    # (about 2 s; more on a loaded machine), well short of the lease and skew "die" waits.
    assert took < (2.0 + SLACK if end == "exit" else LEASE + SKEW + SLACK)
    assert gone(pid)
