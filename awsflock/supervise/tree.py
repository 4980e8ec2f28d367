"""Which processes are a command's work, on Linux: every process descended from it that stays
in its session, in whatever process group (``timeout`` and ``set -m`` jobs move to groups of
their own), found through ``/proc``.

awsflock makes itself a *child subreaper* (``PR_SET_CHILD_SUBREAPER``) before it starts the
command: a process whose parent exits is then handed to awsflock, not to init, so every live
descendant is always reachable from awsflock's own children, and none is lost when a script
exits before its background job. awsflock reaps those it is handed once they exit. A process
that calls ``setsid`` leaves the session (a daemon), and is not counted, nor what it starts.
Processes in awsflock's own process group are its own helpers (a ``credential_process``, the
guard), never the command's work.

The guard: a shell process outside the command's groups that reads the groups awsflock reports
on a pipe, and KILLs them if the pipe closes without ``done``: if awsflock itself is killed
(SIGKILL, the OOM killer), the work it protected does not go on while its lease runs out.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass, field

PR_SET_CHILD_SUBREAPER = 36
#: The guard: it ignores the signals a terminal or a job's end sends, collects pgids, and on
#: end of input without "done" KILLs each group it was told of (``-N``: no longer to kill).
GUARD = (
    "trap '' INT HUP TERM QUIT TSTP TTIN TTOU\n"
    "groups=\n"
    "while read -r word; do\n"
    '  case $word in done) exit 0 ;; -*) groups=$(echo "$groups" | tr " " "\\n" | '
    'grep -vx -- "${word#-}" | tr "\\n" " ") ;; *) groups="$groups $word" ;; esac\n'
    "done\n"
    "for g in $groups; do kill -KILL -$g 2>/dev/null; done\n"
)


def become_subreaper(prctl: object) -> bool:
    """Make this process the reaper of its orphaned descendants (Linux 3.4+); False where it
    cannot be (then only the command's own process group is followed)."""
    if prctl is None:
        return False
    try:
        return int(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0  # type: ignore[operator]
    except (OSError, TypeError, ValueError):
        return False


@dataclass(frozen=True)
class Proc:
    pid: int
    state: str
    ppid: int
    pgid: int
    sid: int
    name: str


def read(pid: int) -> Proc | None:
    """Process ``pid`` as /proc/PID/stat has it, None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    left, right = text.find("("), text.rfind(")")
    fields = text[right + 2 :].split()
    try:
        return Proc(
            pid, fields[0], int(fields[1]), int(fields[2]), int(fields[3]), text[left + 1 : right]
        )
    except (IndexError, ValueError):
        return None


def children(pid: int) -> list[int] | None:
    """The children of ``pid`` (of each of its threads), None where the kernel does not list
    them (no CONFIG_PROC_CHILDREN)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []  # gone
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found.extend(int(word) for word in f.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{task}"):
                continue  # the thread ended meanwhile
            return None
        except OSError:
            continue
    return found


def _children_by_scan(root: int) -> dict[int, list[int]]:
    """Everyone's children, from one pass over /proc (where the kernel lists no children)."""
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            proc = read(int(name))
            if proc is not None:
                tree.setdefault(proc.ppid, []).append(proc.pid)
    return tree


@dataclass
class Tree:
    """The work of a command started by this process (a subreaper): ``helpers`` are this
    process's other children (the guard), never counted."""

    command: int
    helpers: set[int] = field(default_factory=set)
    me: int = field(default_factory=os.getpid)

    def __post_init__(self) -> None:
        self.pgid = os.getpgid(0)
        self.sid = os.getsid(0)

    def members(self) -> list[Proc]:
        """The live processes of the work now. A process missed because its parent exited while
        it was being read has been handed to this process by then, so an empty answer is
        checked once more against this process's own children."""
        self.reap()
        found = self._walk()
        return found or self._walk()

    def _walk(self) -> list[Proc]:
        scanned: dict[int, list[int]] | None = None

        def kids(pid: int) -> list[int]:
            nonlocal scanned
            listed = children(pid)
            if listed is not None:
                return listed
            if scanned is None:
                scanned = _children_by_scan(self.me)
            return scanned.get(pid, [])

        found: list[Proc] = []
        todo = [pid for pid in kids(self.me) if pid not in self.helpers]
        seen: set[int] = set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            proc = read(pid)
            if proc is None or proc.sid != self.sid or proc.pgid == self.pgid:
                continue  # gone; left the session (a daemon); or one of our own helpers
            if proc.state not in ("Z", "X"):
                found.append(proc)
            todo.extend(kids(pid))
        return sorted(found, key=lambda p: p.pid)

    def reap(self) -> None:
        """Reap the exited processes handed to us (not the command, which ``Popen`` waits for,
        nor a helper, nor one of our own group's, whose starter waits for it)."""
        for pid in children(self.me) or []:
            if pid == self.command or pid in self.helpers:
                continue
            proc = read(pid)
            if proc is not None and proc.state == "Z" and proc.pgid != self.pgid:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)


class Guard:
    """The shell that KILLs the work's process groups if awsflock dies before saying done."""

    def __init__(self) -> None:
        self.told: set[int] = set()
        try:
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                ["/bin/sh", "-c", GUARD],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            self.proc = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def follow(self, groups: set[int]) -> None:
        """Tell the guard the work's process groups now (new ones added, gone ones dropped)."""
        lines = [f"{g}\n" for g in sorted(groups - self.told)]
        lines += [f"-{g}\n" for g in sorted(self.told - groups)]
        if lines and self._say("".join(lines)):
            self.told = set(groups)

    def done(self) -> None:
        """The work is over (or no longer ours to stop): the guard ends without a KILL."""
        if self.proc is not None:
            self._say("done\n")
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # type: ignore[union-attr]
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)

    def _say(self, text: str) -> bool:
        if self.proc is None or self.proc.stdin is None:
            return False
        try:
            self.proc.stdin.write(text.encode())
            self.proc.stdin.flush()
            return True
        except OSError:
            return False
