"""``--state-file`` as a real process against real servers, on each store kind: ``acquire``
writes the state to a file and ``renew`` writes it back; ``run`` gives CMD the file, writes it
back with its renewals and at the end; a checkpointing migration SIGKILLed mid-run resumes from
its last checkpoint; a paused, stale holder's write is refused."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.integration.conftest import Cli

pytestmark = pytest.mark.one_server_per_kind("state written with renewals and read at grants")

#: A migration of 30 batches: resumes after the batch in the state file, checkpoints each one
#: (a whole file renamed over it), and logs each batch it runs.
MIGRATION = (
    'last=$(cat "$AWSFLOCK_STATE_FILE"); last=${last:-0}; '
    "for b in $(seq $((last + 1)) 30); do "
    '  echo "$b" >> LOG; '
    '  echo "$b" > "$AWSFLOCK_STATE_FILE.new"; '
    '  mv "$AWSFLOCK_STATE_FILE.new" "$AWSFLOCK_STATE_FILE"; '
    "  sleep 0.1; "
    "done"
)


def test_acquire_reads_the_state_and_renew_writes_it(awsflock: Cli, lock_name, tmp_path):
    state = tmp_path / "state"
    held = awsflock("acquire", lock_name, "--state-file", str(state), "--json")
    assert held.returncode == 0, held.stderr
    grant = json.loads(held.stdout)
    assert state.read_bytes() == b"" and grant["state"] is None and grant["state_base64"] is None
    state.write_text("batch=7\n")
    renewed = awsflock("renew", lock_name, grant["lease_id"], "--state-file", str(state))
    assert renewed.returncode == 0, renewed.stderr
    assert renewed.stdout.strip() == grant["lease_id"]
    assert awsflock("release", lock_name, grant["lease_id"]).returncode == 0
    state.unlink()
    again = awsflock("acquire", lock_name, "--state-file", str(state), "--json")
    assert again.returncode == 0, again.stderr
    assert state.read_text() == "batch=7\n"
    assert json.loads(again.stdout)["state"] == "batch=7\n"
    released = awsflock("release", lock_name, json.loads(again.stdout)["lease_id"])
    assert released.returncode == 0


def test_a_released_holder_cannot_write_the_state(awsflock: Cli, lock_name, tmp_path):
    state = tmp_path / "state"
    lease_id = awsflock("acquire", lock_name).stdout.strip()
    assert awsflock("release", lock_name, lease_id).returncode == 0
    state.write_text("stale")
    refused = awsflock("renew", lock_name, lease_id, "--state-file", str(state))
    assert refused.returncode == 3, refused.stderr
    assert "it was released" in refused.stderr
    read = awsflock("acquire", lock_name, "--state-file", str(state), "--json")
    assert state.read_text() == "" and json.loads(read.stdout)["state"] is None


def test_bad_state_files_are_refused_with_one_line(awsflock: Cli, lock_name, tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 4097)
    lease_id = awsflock("acquire", lock_name).stdout.strip()
    too_big = awsflock("renew", lock_name, lease_id, "--state-file", str(big))
    assert too_big.returncode == 2 and "more than 4096 bytes" in too_big.stderr, too_big.stderr
    missing = awsflock("renew", lock_name, lease_id, "--state-file", str(tmp_path / "none"))
    assert missing.returncode == 2 and "cannot read the state file" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert awsflock("release", lock_name, lease_id).returncode == 0
    pool = awsflock("acquire", lock_name + "-pool", "--slots", "2", "--state-file", str(big))
    assert pool.returncode == 2 and "not with a pool" in pool.stderr, pool.stderr
    nowhere = awsflock("acquire", lock_name, "--state-file", str(tmp_path / "no" / "such"))
    assert nowhere.returncode == 2 and "cannot write the state file" in nowhere.stderr
    status = json.loads(awsflock("status", lock_name, "--json").stdout)
    assert status["state"] == "free", status  # given back: nobody was told of that lease


def test_run_gives_cmd_the_file_and_writes_it_back_at_the_end(awsflock: Cli, lock_name, tmp_path):
    state = tmp_path / "state"
    result = awsflock(
        "run", lock_name, "--state-file", str(state),
        "-c", f'test "$AWSFLOCK_STATE_FILE" = {state} && echo done > "$AWSFLOCK_STATE_FILE"',
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    check = awsflock("acquire", lock_name, "--state-file", str(tmp_path / "read"), "--json")
    assert json.loads(check.stdout)["state"] == "done\n", check.stdout


def test_a_killed_migration_resumes_from_its_last_checkpoint(awsflock: Cli, lock_name, tmp_path):
    state = tmp_path / "state"
    log = tmp_path / "LOG"
    script = MIGRATION.replace("LOG", str(log))
    first = awsflock.popen(
        "run", lock_name, "--lease-duration", "3s", "--state-file", str(state), "-c", script
    )
    for _ in range(200):  # let it checkpoint a few batches, past a renewal or two
        if log.exists() and len(log.read_text().split()) >= 20:
            break
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)  # awsflock and (PR_SET_PDEATHSIG) its command
    first.wait(timeout=10)
    time.sleep(0.3)
    ran_first = [int(b) for b in log.read_text().split()]
    told = tmp_path / "previous"
    second = awsflock(
        "run", lock_name, "--lease-duration", "3s", "--wait-time", "60s",
        "--state-file", str(state), "-c", f'echo "$AWSFLOCK_PREVIOUS" > {told}; {script}',
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert told.read_text() == "expired\n"  # told the killed holder did not finish
    ran = [int(b) for b in log.read_text().split()]
    resumed_at = ran[len(ran_first)]
    # Resumed after a batch the first run checkpointed with a renewal: nothing before it was
    # run twice, and at most the batches since its last renewal were.
    assert 1 < resumed_at <= ran_first[-1] + 1, (ran_first, ran)
    assert ran[len(ran_first) :] == list(range(resumed_at, 31))
    assert ran_first[-1] - resumed_at < 20, (ran_first, ran)  # within a renewal or two


def test_a_paused_stale_holders_write_is_refused(awsflock: Cli, lock_name, tmp_path):
    """A script that paused past its lease (here: slept), whose lock another took meanwhile,
    writes its checkpoint with ``renew --state-file``: refused, the new holder's state kept."""
    stale = awsflock("acquire", lock_name, "--lease-duration", "1s").stdout.strip()
    fresh = tmp_path / "fresh"
    taken = awsflock(
        "run", lock_name, "--wait-time", "30s", "--state-file", str(fresh),
        "-c", 'echo fresh > "$AWSFLOCK_STATE_FILE"',
    )  # fmt: skip
    assert taken.returncode == 0, taken.stderr
    late = tmp_path / "late"
    late.write_text("stale")
    refused = awsflock("renew", lock_name, stale, "--state-file", str(late))
    assert refused.returncode == 3, refused.stderr
    read = awsflock("acquire", lock_name, "--state-file", str(tmp_path / "read"), "--json")
    assert json.loads(read.stdout)["state"] == "fresh\n", read.stdout


def test_status_shows_the_state_kept_when_asked(awsflock: Cli, lock_name, tmp_path):
    state = tmp_path / "state"
    plain = awsflock("status", lock_name, "--state")
    assert plain.returncode == 3 and "state kept: none written" in plain.stdout, plain.stdout
    state.write_text("batch=41")
    lease_id = awsflock("acquire", lock_name).stdout.strip()
    assert awsflock("renew", lock_name, lease_id, "--state-file", str(state)).returncode == 0
    held = awsflock("status", lock_name, "--state")
    assert held.returncode == 0, held.stderr
    assert "state kept:    8 bytes, written" in held.stdout and ": batch=41" in held.stdout
    assert awsflock("release", lock_name, lease_id).returncode == 0
    free = json.loads(awsflock("status", lock_name, "--state", "--json").stdout)
    kept = free["state_kept"]
    assert (kept["bytes"], kept["state"], kept["state_base64"]) == (8, "batch=41", "YmF0Y2g9NDE=")
    assert "state kept" not in awsflock("status", lock_name).stdout  # one request without it


def test_a_state_file_that_is_not_a_regular_file_is_refused_before_the_lock(
    awsflock: Cli, lock_name, tmp_path
):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for command in (("acquire",), ("run", "--state-file", str(fifo), "--", "true")):
        args = (command[0], lock_name, *command[1:])
        if command == ("acquire",):
            args = (*args, "--state-file", str(fifo))
        refused = awsflock(*args)
        assert refused.returncode in (2, 125), refused.stderr
        assert "is not a regular file" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    status = json.loads(awsflock("status", lock_name, "--json").stdout)
    assert status["state"] == "free" and "owner" not in status, status  # never taken
