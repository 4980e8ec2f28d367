"""How ``run`` starts CMD: the signals it forwards, and what the child does between fork and
exec (its own process group, death with its parent, the terminal)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any, Callable

FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
#: The exit status of ``run`` when it fails in the child before CMD starts.
EXIT_OWN_FAILURE = 125


def prctl() -> Any:
    """libc's prctl on Linux (looked up before fork: nothing is loaded in the child)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


PR_SET_PDEATHSIG = 1


def child_setup(foreground: bool) -> Callable[[], None]:
    """Runs in the child between fork and exec: own process group, die with the parent.

    It runs before the renewal thread starts, and calls nothing that takes a lock."""
    parent = os.getpid()
    prctl_call = prctl()

    def setup() -> None:
        # awsflock holds these back while starting CMD; CMD itself must receive them.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        os.setpgid(0, 0)
        if prctl_call is not None:
            # If awsflock is SIGKILLed, the command must not go on unprotected: it is killed too.
            prctl_call(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(EXIT_OWN_FAILURE)
        if foreground:
            # Take over the terminal so an interactive command (terraform's "yes") can read it.
            old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
            with contextlib.suppress(OSError):
                os.tcsetpgrp(0, os.getpgrp())
            signal.signal(signal.SIGTTOU, old)

    return setup


def has_terminal() -> bool:
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False
