"""What ``awsflock run`` does beside its command so that the command's work is followed to its
end, on Linux: it makes itself a *child subreaper* (``PR_SET_CHILD_SUBREAPER``), so a process of
the command's group whose parent exits is handed to awsflock, not to init (or a container's pid
1 that may never reap it), and reaps it once it exits: the kernel's "is anyone left in the
group?" (``kill(-PGID, 0)``) then answers for live processes alone, at once and atomically.

The guard: a shell process in awsflock's own group that reads, on a pipe, the process group to
protect, and KILLs it if the pipe closes without ``done``: if awsflock itself is killed
(SIGKILL, the OOM killer), the work it protected does not run on while its lease runs out.
"""

from __future__ import annotations

import contextlib
import os
import subprocess

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


def reap_group(pgid: int, command: int) -> None:
    """Reap the exited processes of process group ``pgid`` that were handed to us as their
    subreaper (not ``command``, which ``Popen`` waits for). Others of our children (a
    ``credential_process``) are left to whoever started them."""
    for pid in children(os.getpid()) or []:
        if pid == command:
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                text = f.read()
            fields = text[text.rfind(b")") + 2 :].split(None, 3)  # state, ppid, pgrp, ...
            state, group = fields[0], int(fields[2])
        except (OSError, ValueError, IndexError):
            continue
        if state == b"Z" and group == pgid:
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
