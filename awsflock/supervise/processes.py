"""What awsflock needs to know of other processes, from ``/proc``: whether one still runs (told
apart from a later process with its pid by its start time), which process a script's
``acquire --keep-alive`` should follow (its shell, past wrappers such as ``timeout`` or
``sudo``), and which processes are left in ``run``'s command's process group."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path


def start_time(pid: int) -> str:
    """The process's start time (Linux: /proc/PID/stat field 22), '' where unknown: with the
    pid, it names one process, not whichever later gets the same pid."""
    stat = _stat(pid)
    return stat[19] if stat is not None and len(stat) > 19 else ""


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()  # fields after the command name: state, ppid...


def alive(pid: int, started: str = "") -> bool:
    """Whether process ``pid`` (started at ``started``, when known) still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, as another user's
    stat = _stat(pid)
    if stat is None:
        return True  # no /proc: the signal check is all there is
    if stat[0] in ("Z", "X"):
        return False  # exited, not yet reaped by its parent
    return not started or stat[19] == started


def group_members(pgid: int, first: bool = False) -> list[tuple[int, str]] | None:
    """The live processes of process group ``pgid`` (pid, name), zombies left out: a zombie has
    exited, and in a container whose pid 1 does not reap it stays one for good. With ``first``,
    only the first found. None where there is no /proc to read."""
    found = group_scan(pgid, first)
    return None if found is None else found[0]


def group_scan(pgid: int, first: bool = False) -> tuple[list[tuple[int, str]], list[int]] | None:
    """Process group ``pgid`` as one pass over /proc sees it: its live processes (pid, name),
    and its zombies' pids. None where there is no /proc to read."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    if "self" not in entries:
        return None
    found: list[tuple[int, str]] = []
    zombies: list[int] = []
    for name in entries:
        if not name.isdigit():
            continue
        fields = _group_and_state(name)
        if fields is None or fields[1] != pgid:
            continue
        if fields[0] in (b"Z", b"X"):
            zombies.append(int(name))
            continue
        found.append((int(name), _name(int(name)) or "?"))
        if first:
            break
    return sorted(found), sorted(zombies)


def _group_and_state(pid: str) -> tuple[bytes, int] | None:
    """(state, pgrp) from /proc/PID/stat, read as bytes: this runs over every process, five
    times a second while ``run`` waits for a group."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
        fields = text[text.rfind(b")") + 2 :].split(None, 3)  # state, ppid, pgrp, ...
        return fields[0], int(fields[2])
    except (OSError, ValueError, IndexError):
        return None


#: Programs that run a command and end with it (``timeout 60 awsflock ...``, ``time``,
#: ``sudo -u``, ...): never the process a lock is kept alive for, so ``default_follow`` passes
#: over them to the script that called them. Matched on the process's name (``comm``).
WRAPPERS = frozenset(
    {
        "timeout",
        "time",
        "nice",
        "ionice",
        "env",
        "stdbuf",
        "chrt",
        "taskset",
        "prlimit",
        "numactl",
        "setpriv",
        "setsid",
        "sudo",
        "doas",
        "su",
        "runuser",
        "flock",
        "strace",
        "ltrace",
        "unbuffer",
        "chronic",
    }
)


def default_follow() -> int:
    """What ``acquire --keep-alive`` follows unless told: in ``LEASE_ID=$(awsflock ...)`` the
    process that reads our output, when it is one of our ancestors (then it is the script's
    shell), whatever runs in between
    (bash forks a subshell for ``$(cmd 2>/dev/null)``; ``timeout`` is a process of its own);
    else our parent, passing over subshells (forks with their parent's command line) and
    wrappers (``WRAPPERS``: ``timeout 60 awsflock acquire ... > FILE`` keeps the lock for the
    script, not for ``timeout``)."""
    reader = _pipe_reader(1)
    if reader is not None and reader in _ancestors():
        return reader  # not a `| cat` or `| logger` that may outlive the script, or end early
    return caller()


def caller() -> int:
    """The process that ran us: our parent, passing over subshells (forks with their parent's
    command line) and wrappers (``WRAPPERS``). For a plain ``acquire``, the script whose
    lease it is: the pid ``status`` shows, which lives as long as the script does."""
    pid = os.getppid()
    while True:
        parent = _parent(pid)
        if parent is None or parent <= 1:
            return pid
        if _name(pid) not in WRAPPERS and (_image(pid) is None or _image(pid) != _image(parent)):
            return pid
        pid = parent


def name(pid: int) -> str:
    """Process ``pid``'s name (``comm``: a script's file name, or its interpreter's), '' if
    gone: shown as what holds a lock, without the arguments (which may carry secrets)."""
    return _name(pid)


def _name(pid: int) -> str:
    """The process's name (``/proc/PID/comm``, readable for every process), '' if gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _pipe_reader(fd: int) -> int | None:
    try:
        info = os.fstat(fd)
    except OSError:
        return None
    if not stat.S_ISFIFO(info.st_mode):
        return None
    target = f"pipe:[{info.st_ino}]"
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        with contextlib.suppress(OSError):
            for link in (entry / "fd").iterdir():
                if os.readlink(link) != target:
                    continue
                flags = (entry / "fdinfo" / link.name).read_text().split("flags:")[1].split()[0]
                if int(flags, 8) & os.O_ACCMODE == os.O_RDONLY:
                    return int(entry.name)
    return None


def _ancestors() -> set[int]:
    """Our parent, its parent, ... up to init."""
    found, pid = set(), os.getppid()
    while pid > 1 and pid not in found:
        found.add(pid)
        pid = _parent(pid) or 0
    return found


def _parent(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields is not None else None


def _image(pid: int) -> tuple[str, bytes] | None:
    try:
        return os.readlink(f"/proc/{pid}/exe"), Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
