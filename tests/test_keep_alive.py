"""The keep-alive renewer's pieces that need no server: following a process, its pid file."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from awsflock.supervise import keepalive, processes, renewers


@pytest.fixture(autouse=True)
def runtime(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return tmp_path


def test_a_live_process_is_followed_and_an_exited_one_is_not():
    assert processes.alive(os.getpid(), processes.start_time(os.getpid()))
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = processes.start_time(child.pid)
    child.wait()
    assert not processes.alive(child.pid, started)


def test_an_exited_but_unreaped_process_counts_as_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = processes.start_time(child.pid)
    # Not waited for: a zombie until we reap it (as a script's shell may be, briefly).
    for _ in range(500):
        with open(f"/proc/{child.pid}/stat") as stat:
            if stat.read().split(") ")[1].startswith("Z"):
                break
        time.sleep(0.01)
    assert not processes.alive(child.pid, started)
    child.wait()


def test_a_recycled_pid_is_not_the_process_followed():
    # Same pid, another start time: another process.
    assert not processes.alive(os.getpid(), "1")


def test_stop_without_a_renewer_does_nothing_and_clears_a_stale_pid_file(runtime):
    assert renewers.stop("no-such-lease") is False
    stale = renewers.pid_file("lease-1")
    stale.write_text("4194303 12345")
    assert renewers.stop("lease-1") is False
    assert not stale.exists()
    assert (runtime / f"awsflock-{os.getuid()}").stat().st_mode & 0o777 == 0o700


def test_stop_signals_a_live_renewer_and_waits_for_it(runtime):
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.pause()"],
    )
    renewers.pid_file("lease-2").write_text(f"{sleeper.pid} {processes.start_time(sleeper.pid)}")
    assert renewers.stop("lease-2") is True
    assert sleeper.wait(timeout=5) == -10  # USR1's default action ends the stand-in


def test_a_plain_release_leaves_no_runtime_directory_and_odd_ids_reach_no_file(runtime):
    assert renewers.stop("8796bea3-57de-4a69-ae23-7a2e01a18de7") is False
    assert not (runtime / f"awsflock-{os.getuid()}").exists()
    with pytest.raises(Exception, match="not a LEASE_ID"):
        renewers.pid_file("../../etc/passwd")


def test_a_renewer_is_stopped_only_for_its_own_lock(runtime):
    stand_in = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    renewers.pid_file("lease-3").write_text(
        f"{stand_in.pid} {processes.start_time(stand_in.pid)} deploy"
    )
    # `release other-lock LEASE_ID` (a typo) must not stop the renewer of deploy's lease.
    assert renewers.stop("lease-3", "other-lock") is False
    assert stand_in.poll() is None
    assert renewers.stop("lease-3", "deploy") is True
    assert stand_in.wait(timeout=5) == -10


def test_a_set_s_renewer_is_found_by_its_names_in_any_order_and_only_by_them(runtime):
    stand_in = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    kept = renewers.lock_key(("db", "app prod", "network"))
    renewers.pid_file("lease-5").write_text(
        f"{stand_in.pid} {processes.start_time(stand_in.pid)} {kept}"
    )
    assert renewers.renewer_of("lease-5", ("db", "network")) is None  # not every name
    assert renewers.renewer_of("lease-5", "db") is None
    assert renewers.stop("lease-5", ("network", "db", "app prod")) is True
    assert stand_in.wait(timeout=5) == -10


def test_stale_pid_files_are_swept(runtime):
    dead = renewers.pid_file("lease-4")
    dead.write_text("4194303 1 deploy")
    renewers.sweep()
    assert not dead.exists()


def test_a_loss_is_appended_to_the_followed_process_log_never_truncating_it(tmp_path):
    from awsflock import errors

    log = tmp_path / "script.log"
    log.write_text("line one\nline two\n")
    with open(log, "a") as stderr:
        script = subprocess.Popen(["sleep", "30"], stderr=stderr)
    try:
        lost = errors.LeaseLost("lease on 'deploy' was lost: renewal refused: it expired")
        keepalive._tell_lost(lost, script.pid, "deploy")
    finally:
        script.kill()
        script.wait()
    text = log.read_text()
    assert text.startswith("line one\nline two\n")
    assert "the lock 'deploy' kept alive for this process was lost (lease on 'deploy'" in text


def test_the_default_follow_is_the_reader_of_our_output():
    # In LEASE_ID=$(awsflock ...) the reader of awsflock's stdout is the script's shell, also
    # when bash forks a subshell for it (a redirection inside) or a wrapper runs it (timeout).
    code = "from awsflock.supervise import processes; print(processes.default_follow())"
    for form in (
        '$({py} -c "{code}")',
        '$({py} -c "{code}" 2>/dev/null)',
        '$(timeout 20 {py} -c "{code}")',
    ):
        inner = form.format(py=sys.executable, code=code)
        script = f'echo "$$ {inner}"'
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
        shell, followed = out.stdout.split()
        assert shell == followed, (form, out.stdout, out.stderr)


def test_a_pipe_reader_that_is_not_the_callers_shell_is_not_followed():
    # `job.sh | cat` (or `| logger`): cat reads our output but may outlive the script, and
    # `$(awsflock ... | jq)`: jq would end at once. Neither is an ancestor: follow the parent.
    code = "from awsflock.supervise import processes; import os; print(processes.default_follow())"
    script = f'{sys.executable} -c "{code}" | cat; echo $$'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    followed, shell = out.stdout.split()
    assert followed == shell, (out.stdout, out.stderr)


def test_a_wrapper_is_passed_over_when_our_output_goes_to_a_file(tmp_path):
    # `timeout 60 awsflock acquire ... --keep-alive > FILE`: nobody reads our output, and our
    # parent is `timeout`, which exits with us: the script's shell is followed.
    code = "from awsflock.supervise import processes; print(processes.default_follow())"
    out = tmp_path / "followed"
    script = f'timeout 20 {sys.executable} -c "{code}" > {out}; echo $$'
    shell = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert out.read_text().strip() == shell.stdout.strip(), shell.stderr
