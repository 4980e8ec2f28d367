"""A backend's link: how one connection to its server is made, used, interrupted and closed,
and how its driver's errors read as awsflock's. The request layer above it (``requests``,
``connected``) owns budgets, retries, doubt, deadlines and the gate; a link owns none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from awsflock import errors

C = TypeVar("C")


@dataclass
class Translated:
    """A driver's error as awsflock's; ``broken``: the connection must not be used again."""

    error: errors.AwsflockError
    broken: bool


class Link(Protocol, Generic[C]):
    """One server's connections (``C``: whatever the driver calls a connection).

    ``connect`` runs in a request thread (and ``close`` there too, on a connection made after
    its caller gave up); ``step`` and otherwise ``close`` in the thread that makes the try, one
    try at a time; ``interrupt`` in the watchdog's, while that thread may be blocked inside
    the driver on ``conn``.
    """

    def where(self) -> str:
        """The server, for messages ("PostgreSQL at user@host:port/db"), never a password."""
        ...

    def connect(self, timeout: float) -> C:
        """A new connection, made within about ``timeout`` (and checked: a link may refuse a
        server here, raising awsflock's error)."""
        ...

    def interrupt(self, conn: C) -> None:
        """Make a call blocked on ``conn`` return now, with an error (shut its socket down).
        Called once, from another thread; ``conn`` is closed afterwards by its user."""
        ...

    def close(self, conn: C) -> None:
        """Close ``conn`` quietly (its user is done with it)."""
        ...

    def translate(self, exc: BaseException, *, operation: str, sent: bool) -> Translated:
        """The driver's ``exc`` as awsflock's error; ``sent``: whether the call may have left
        (an error after it may still have been applied: ``maybe_applied``)."""
        ...


def unreachable(where: str, text: str, *, sent: bool) -> Translated:
    """A connection that broke, timed out or could not be made: the request may have been
    applied, with only its answer lost, if it was sent (``maybe_applied``). Retried."""
    err = errors.EndpointUnreachable(
        f"{where} could not be reached: {text}",
        hint="check that the server is up, and the URL's host and port",
    )
    err.maybe_applied = sent
    return Translated(err, broken=True)


def driver(module: str, store: str, name: str, extra: str) -> Any:
    """The driver ``module`` (imported now), or a ConfigurationError saying how to install
    ``extra``: "the ``store`` store needs ``name``, which is not installed"."""
    import importlib

    from awsflock import extras

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise errors.ConfigurationError(
            f"the {store} store needs {name}, which is not installed", hint=extras.hint(extra)
        ) from exc


def shut(sock: Any) -> None:
    """Shut a socket down both ways, quietly: a thread blocked reading it returns at once."""
    import contextlib
    import socket

    with contextlib.suppress(OSError, ValueError, AttributeError):
        sock.shutdown(socket.SHUT_RDWR)


def shut_fd(fd: int) -> None:
    """``shut`` for a socket known by its file descriptor (libpq's): the descriptor is
    duplicated, so closing the duplicate leaves the driver's own untouched."""
    import contextlib
    import os
    import socket

    if fd < 0:
        return
    with contextlib.suppress(OSError):
        dup = socket.socket(fileno=os.dup(fd))
        try:
            shut(dup)
        finally:
            dup.close()
