"""The process's output and its end: results on stdout (a LEASE_ID, JSON), what happens when
stdout's reader has gone (``awsflock list | head -1`` is no failure; an unwritable LEASE_ID is
an error its caller handles), and the exit without the interpreter's teardown."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from awsflock.lock.lease import Lease
    from awsflock.lock.set_table import LeaseSet


def emit(data: dict[str, Any]) -> None:
    click.echo(json.dumps(data, sort_keys=True))


def print_lease(lease: Lease | LeaseSet, as_json: bool) -> None:
    """stdout of acquire and renew: the LEASE_ID alone (0.2.0's contract), or JSON; flushed at
    once. Raises OSError if it cannot be written (a pipe nobody reads, a closed stdout), after
    which stdout writes nowhere (so the exit reports nothing more about it)."""
    try:
        if sys.stdout is None:
            raise OSError("stdout is closed")
        if as_json:
            emit(lease.as_dict())
        else:
            click.echo(lease.lease_id)
        sys.stdout.flush()
    except OSError:
        stdout_nowhere()
        raise


def stdout_nowhere() -> None:
    """Point stdout at /dev/null, dropping what it holds unwritten."""
    import os

    null = open(os.devnull, "w")  # noqa: SIM115 (stdout until the process ends)
    try:
        os.dup2(null.fileno(), sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        sys.stdout = null


def stdout_unread() -> bool:
    """Whether stdout is a pipe (or socket) whose reader has gone: a write to it would fail
    with EPIPE. A broken pipe from anywhere else (a connection) is not this."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.__stdout__.fileno() if sys.__stdout__ else 1, select.POLLOUT)
        events = poller.poll(0)
    except (AttributeError, OSError, ValueError):  # no poll (Windows), no stdout
        return False
    return any(mask & select.POLLERR for _fd, mask in events)


def end(code: object) -> None:
    """End the process with ``code`` as ``sys.exit`` would, skipping only the interpreter's
    teardown: freeing every module and object takes about 40 ms once botocore is loaded (a fifth
    of a short command), and no state of awsflock's lives in it. What a normal exit does first
    is done here too: the output is flushed, the ``atexit`` functions run (logging's flush among
    them) and other threads are joined. Where the output cannot be flushed (a closed pipe), the
    normal exit is taken, which reports it."""
    import atexit
    import os
    import threading

    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    if not flushed():
        raise SystemExit(status)
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    join_threads = getattr(threading, "_shutdown", None)
    if run_exitfuncs is None or join_threads is None:  # not CPython: exit as ever
        raise SystemExit(status)
    join_threads()
    run_exitfuncs()
    if not flushed():
        raise SystemExit(status)
    os._exit(status & 0xFF)  # as the OS keeps a status: sys.exit(-1) is 255


def flushed() -> bool:
    """Whether stdout and stderr were flushed (a closed one, None, has nothing to flush). What
    stdout holds for a reader that has gone (``awsflock list | head -1``) is dropped: the
    reader wanted no more, which is no failure."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            if stream is not sys.stdout or not stdout_unread():
                return False
            stdout_nowhere()
    return True
