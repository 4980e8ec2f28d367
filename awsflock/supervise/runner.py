"""``awsflock run``: hold a lock while a command runs.

The command runs directly (no shell unless ``-c``) in its own process group, with stdin, stdout
and stderr passed through. Signals INT, TERM, HUP, QUIT, USR1 and USR2 are forwarded to its group.
The lock is held until the command and every process left in its group have exited
(``awsflock.supervise.group``). If the lease is lost, the group gets TERM and, after
``kill_after``, KILL — timed so that it is dead before the lease could be taken by another. On
Linux the child is killed if awsflock itself dies (``PR_SET_PDEATHSIG``). ``run`` never exits
while the command is still running.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from awsflock import errors
from awsflock.lock import renewal
from awsflock.lock.audit_log import record_capped
from awsflock.supervise import tree
from awsflock.supervise.child import (
    EXIT_OWN_FAILURE,
    FORWARDED,
    child_setup,
    has_terminal,
    prctl,
)
from awsflock.supervise.group import STOP_SIGNALS, Group, Watch, supervise
from awsflock.supervise.notify import Notifier
from awsflock.supervise.state_file import StateFile

if TYPE_CHECKING:
    from types import FrameType

    from awsflock.lock.heartbeat import Hold
    from awsflock.lock.lease import LockTable

log = logging.getLogger("awsflock.runner")

EXIT_NOT_ACQUIRED = 75
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127
#: CMD succeeded, but its last state was not written (``--state-file``): awsflock's own failure.
EXIT_UNSAVED = EXIT_OWN_FAILURE
#: After a loss, the release is tried for at most this long (the endpoint is likely sick).
RELEASE_AFTER_LOSS = 1.5


@dataclass
class RunOptions:
    lease: float = 60.0
    wait: float | None = 60.0
    kill_after: float | None = None  # None: the renewal policy's default
    conflict_exit_code: int = EXIT_NOT_ACQUIRED
    slots: int | None = None
    fair: bool = False
    shared: bool = False
    #: The holder's lock-delay and max-hold (``--lock-delay``, ``--max-hold``), seconds.
    lock_delay: float = 0.0
    max_hold: float | None = None
    #: ``--notify-after D CMD2``: (D, CMD2), or None.
    notify_after: tuple[float, str] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    #: "group": hold until the command and every process left in its group have exited;
    #: "command": release when the command itself exits (``--hold-until``).
    hold_until: str = "group"
    #: ``--state-file PATH``: the lock's state as a file CMD reads and writes (``state_file``).
    state_file: str | None = None


def resolve(argv: list[str]) -> str:
    """The executable's path, or raise with the exit code flock(1)/env(1) users expect."""
    name = argv[0]
    if os.sep in name:
        if not os.path.exists(name):
            raise _CommandProblem(EXIT_NOT_FOUND, f"command not found: {name}")
        if os.path.isdir(name) or not os.access(name, os.X_OK):
            raise _CommandProblem(EXIT_NOT_EXECUTABLE, f"command not executable: {name}")
        return name
    found = shutil.which(name)
    if found is None:
        raise _CommandProblem(
            EXIT_NOT_FOUND,
            f"command not found: {name} (if {name!r} is another lock to hold, end the lock "
            f"names with --: awsflock run LOCK {shlex.quote(name)} -- CMD)",
        )
    return found


class _CommandProblem(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def run(
    table: LockTable, lock_id: str | tuple[str, ...], argv: list[str], options: RunOptions
) -> int:
    """Acquire ``lock_id``, run ``argv`` while renewing, release; return the exit status."""
    if not argv:
        raise errors.UsageError(
            "no command to run", hint="give one after --, e.g. awsflock run LOCK -- make deploy"
        )
    kill_after, margin = renewal.POLICY.run_timing(
        options.lease, options.max_hold, options.kill_after
    )
    try:
        executable = resolve(argv)
    except _CommandProblem as problem:
        log.error("%s", problem.message)
        return problem.code

    signals = _Forwarder()
    previous = {sig: signal.signal(sig, signals) for sig in FORWARDED}
    lost = threading.Event()
    notifier: Notifier | None = None
    hold = _hold_of(table, lock_id, options, margin, lost, signals.cancel)
    files = None if options.state_file is None else StateFile(options.state_file)
    try:
        refused = _acquire(hold, signals.received, options, files)
        if refused is not None:
            return refused
        started = _start(hold, executable, argv, options, signals)
        if isinstance(started, int):
            return started
        child, group, foreground = started
        hold.state_source = files
        hold.start_renewing()
        notifier = Notifier.start_for(options.notify_after, _command_env(hold, options))
        group_too = options.hold_until == "group"
        watch = Watch(child, group, hold, lost, kill_after, group_too, signals.received)
        watch.take_terminal = _take_terminal_back if foreground else None
        status = supervise(watch)
        if foreground:
            # Only now: a process left in the group may still read from the terminal.
            _take_terminal_back()
        unsaved = files is not None and not lost.is_set() and not files.finish(hold)
        released = _release_quietly(hold)
        if watch.capped and options.max_hold is not None:  # after the release: not in its way
            record_capped(table, hold, options.max_hold)
        if not released:
            return watch.lost_status()
        return EXIT_UNSAVED if unsaved and status == 0 else status
    finally:
        if notifier is not None:
            notifier.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _hold_of(
    table: LockTable,
    lock_id: str | tuple[str, ...],
    options: RunOptions,
    margin: float,
    lost: threading.Event,
    cancel: threading.Event,
) -> Hold:
    """The hold of ``run``'s lock: ``lost`` set when it is lost, its wait ended by ``cancel``."""
    return table.hold(
        lock_id,
        lease=options.lease,
        wait=options.wait,
        margin=margin,
        on_lost=lambda _hold, _err: lost.set(),
        slots=options.slots,
        cancel=cancel,
        fair=options.fair,
        shared=options.shared,
        lock_delay=options.lock_delay,
        max_hold=options.max_hold,
        state=options.state_file is not None,
    )


class _Forwarder:
    """The handler of the forwarded signals: each is recorded in ``received`` and sets
    ``cancel`` (which ends the wait, and keeps CMD from starting once granted), and goes to
    CMD's group once there is one (``forward_to``). One that comes while CMD starts is kept
    until then: the mask that holds signals back covers the main thread only, and another
    thread may take one in and have it handled at once."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.cancel = threading.Event()
        self.group: Group | None = None
        self.kept: list[int] = []

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        self.cancel.set()
        group = self.group
        if group is None:
            self.kept.append(signum)
        else:
            _forward(group, signum)

    def forward_to(self, group: Group) -> Group:
        """From now on, signals go to ``group``; those that came while CMD started go now.
        (Handlers run in the main thread, between its steps, so none is lost or sent twice.)"""
        self.group = group
        kept, self.kept = self.kept, []
        for signum in kept:
            _forward(group, signum)
        return group


def _forward(group: Group, signum: int) -> None:
    group.signal(signum)
    if signum in STOP_SIGNALS:
        group.signal(signal.SIGCONT)  # a stopped command (Ctrl-Z) must get it too


def _acquire(
    hold: Hold, received: list[int], options: RunOptions, files: StateFile | None
) -> int | None:
    """Wait for the lock: None once it is granted (the state written to ``files``), else the
    exit status (interrupted, the lock stayed held by another, or the state file could not be
    written), said on stderr."""
    try:
        hold.acquire()
    except errors.Cancelled:
        signum = received[0] if received else signal.SIGTERM
        log.warning("interrupted by signal %d while waiting; the command was not started", signum)
        return 128 + signum
    except errors.LockBusy as busy:
        log.log(
            logging.INFO if options.conflict_exit_code == 0 else logging.WARNING,
            "%s; not running the command",
            busy.one_line(),
        )
        return options.conflict_exit_code
    try:
        if files is not None:
            files.seed(hold.state)
    except errors.UsageError as exc:  # the lease is held: given back
        log.error("%s; released the lock, the command was not started", exc.one_line())
        _release_quietly(hold)
        return EXIT_OWN_FAILURE
    return None


def _start(
    hold: Hold, executable: str, argv: list[str], options: RunOptions, signals: _Forwarder
) -> tuple[subprocess.Popen[bytes], Group, bool] | int:
    """Start CMD under the lock just granted: the command, its group (now ``signals.group``)
    and whether it has the terminal; or, if it was not started (a signal came with the grant,
    or it cannot be run), the lock is released and the exit status returned."""
    # From here until CMD's group is known, a signal is held back: one that came after the
    # grant but before this point means "do not start" (the lock is released); one that comes
    # later is forwarded to the group once it is known.
    received = signals.received
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    if received:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        log.warning(
            "interrupted by signal %d just after the lock was granted; released it, the "
            "command was not started",
            received[0],
        )
        _release_quietly(hold)
        return 128 + received[0]
    env = _command_env(hold, options)
    foreground = has_terminal()
    tracked = tree.become_subreaper(prctl())
    guard = tree.Guard()
    try:
        child = subprocess.Popen(
            [executable, *argv[1:]], env=env, preexec_fn=child_setup(foreground)
        )
    except OSError as exc:
        code = EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_NOT_EXECUTABLE
        log.error("cannot run %s: %s", argv[0], exc.strerror or exc)
        guard.done()
        _release_quietly(hold)
        return code
    else:
        # Signals held back since the grant, or kept, go to the group.
        group = signals.forward_to(_work_of(child, guard, tracked))
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    return child, group, foreground


def _work_of(child: subprocess.Popen[bytes], guard: tree.Guard, reaper: bool) -> Group:
    """What ``run`` waits for and stops: the command's process group, which the guard is told
    of now; awsflock reaps the group's orphans if it could become their subreaper."""
    guard.follow({child.pid})
    return Group(child.pid, guard=guard, reaper=reaper)


def _command_env(hold: Hold, options: RunOptions) -> dict[str, str]:
    """CMD's environment: ours, and what it needs to know of the lock (never the LEASE_ID)."""
    env = dict(os.environ)
    env.update(options.extra_env)
    names, tokens = hold.lock_ids, hold.fencing_tokens
    env.update(
        {
            "AWSFLOCK_HELD": "1",
            "AWSFLOCK_LOCK_ID": "\n".join(names),
            "AWSFLOCK_OWNER": hold.lease.owner,
            "AWSFLOCK_LOCKS": str(len(names)),
        }
    )
    # How the lease before each ended: first, released, expired, forced; unknown where the
    # store does not say (a record from before it kept it).
    previous = {n: p.how if p is not None else "unknown" for n, p in hold.previous.items()}
    for n, name in enumerate(names, start=1):
        env[f"AWSFLOCK_LOCK_ID_{n}"] = name
        env[f"AWSFLOCK_FENCING_TOKEN_{n}"] = str(tokens[name])
        env[f"AWSFLOCK_PREVIOUS_{n}"] = previous.get(name, "unknown")
    if len(names) == 1:
        env["AWSFLOCK_FENCING_TOKEN"] = str(hold.fencing_token)
        env["AWSFLOCK_PREVIOUS"] = previous.get(names[0], "unknown")
    else:
        env.pop("AWSFLOCK_FENCING_TOKEN", None)  # never one inherited from an outer run
        env.pop("AWSFLOCK_PREVIOUS", None)
    if hold.slot is not None:
        env["AWSFLOCK_SLOT"] = str(hold.slot)
    env["AWSFLOCK_SHARED"] = "1" if options.shared else "0"
    if options.state_file is not None:
        # The file's own path (a link's target): a new file renamed over it replaces the file
        # awsflock reads, not the link (found by review 10).
        env["AWSFLOCK_STATE_FILE"] = os.path.realpath(os.path.abspath(options.state_file))
    return env


def _take_terminal_back() -> None:
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(0, os.getpgrp())
    except OSError:
        pass
    finally:
        signal.signal(signal.SIGTTOU, old)


def _release_quietly(hold: Hold) -> bool:
    """Release at the end; a failure is a warning, never a changed exit status. False if the
    lease turned out to have been lost (force-released, or expired and taken) while CMD ran."""
    if hold.lost.is_set():
        # Still try to release: a renewal that landed after the loss was declared (its answer
        # late or lost) would otherwise keep the lock held for a whole lease after we exit.
        # A refusal (the lease is someone else's, or force-released) is expected here.
        store = hold.table.store
        end = hold.clock.monotonic() + min(store.request_timeout, RELEASE_AFTER_LOSS)
        with contextlib.suppress(errors.AwsflockError), store.budget(end):
            hold.stop(join_timeout=0.5)
        # Lost while CMD ran (it may have finished just before awsflock noticed): its work was
        # not all protected, which 124 says; its own status would hide it.
        return False
    try:
        hold.stop()
    except errors.LeaseLost as exc:
        log.error("%s", exc.one_line(), extra={"event": "lost", "lock_id": hold.lock_id})
        return False
    except errors.AwsflockError as exc:
        log.warning(
            "could not release %r (%s): it may stay held until its lease ends, under LEASE_ID %s: "
            "free it sooner with `awsflock release %s %s`",
            hold.lock_id,
            exc.one_line(),
            hold.lease_id,
            hold.lock_id,
            hold.lease_id,
            extra={
                "event": "release_failed",
                "lock_id": hold.lock_id,
                "lease_id": hold.lease_id,
                "error": type(exc).__name__,
            },
        )
    return True
