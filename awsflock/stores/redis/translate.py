"""redis-py's errors as awsflock's: every failure of a connect or a command is turned into one of
``awsflock.errors`` here, with the fix named, and nowhere else.

Whether a failed command may still have been applied: only when the connection broke or timed
out after it was sent. An error reply means the server ran nothing of it (the step script makes
every check before its first write, so even its errors change nothing).
"""

from __future__ import annotations

from awsflock import errors
from awsflock.stores.remote.link import Translated

#: Error replies that clear up by themselves: retried, never applied.
_TRANSIENT = {
    "BUSY": "busy running a script that has not finished (see SCRIPT KILL)",
    "LOADING": "loading its data set after a start",
    "MASTERDOWN": "cut off from its primary",
    "TRYAGAIN": "in the middle of moving keys between shards",
    "CLUSTERDOWN": "a cluster that is down",
}


def clears_up(exc: BaseException) -> bool:
    """Whether an error reply is one that clears up by itself (retried, never applied)."""
    import redis.exceptions as rx

    code = (str(exc).strip().split(" ", 1) or [""])[0]
    return isinstance(exc, rx.BusyLoadingError) or code in _TRANSIENT


def acl_hint(prefix: str) -> str:
    """What to grant, for ``NOPERM`` messages."""
    from awsflock.stores.redis.acl import rules

    return f"grant the user: ACL SETUSER USER {rules(prefix, read_only=False)}"


def translate(
    exc: BaseException, *, operation: str, where: str, prefix: str, sent: bool
) -> Translated:
    """``exc``, raised by redis-py during ``operation``, as an awsflock error."""
    import redis.exceptions as rx

    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    code = text.split(" ", 1)[0]
    refused = _refused(exc, code, text, operation=operation, where=where, prefix=prefix)
    if refused is not None:
        return refused
    if clears_up(exc):
        reason = _TRANSIENT.get(code, _TRANSIENT["LOADING"])
        throttled = errors.Throttled(
            f"{where} refused {operation}: {reason} ({text})", hint="retry"
        )
        return Translated(throttled, broken=isinstance(exc, rx.ConnectionError))
    if isinstance(exc, rx.OutOfMemoryError) or code == "OOM":
        err = errors.StoreError(
            f"{where} is out of memory: {text}",
            hint="raise maxmemory, or free memory (awsflock's keys must never be evicted: "
            "keep maxmemory-policy noeviction)",
        )
        return Translated(err, broken=False)
    if isinstance(exc, (rx.ConnectionError, rx.TimeoutError)):
        unreachable = errors.EndpointUnreachable(
            f"{where} could not be reached: {text}",
            hint="check that the server is up, and the URL's host and port",
        )
        # Sent and unanswered: the step may have run, with only its answer lost.
        unreachable.maybe_applied = sent
        return Translated(unreachable, broken=True)
    if isinstance(exc, rx.ResponseError):
        failed = errors.StoreError(f"{where}: {operation} failed: {text}")
        # A script that failed on its way may have written before it did.
        failed.maybe_applied = sent and "script" in text
        return Translated(failed, broken=False)
    if isinstance(exc, rx.DataError):
        return Translated(errors.UsageError(f"bad Redis URL or value: {text}"), broken=True)
    failed = errors.StoreError(f"{where}: {operation} failed: {type(exc).__name__}: {text}")
    failed.maybe_applied = sent
    return Translated(failed, broken=True)


def _refused(
    exc: BaseException, code: str, text: str, *, operation: str, where: str, prefix: str
) -> Translated | None:
    """A command the server refused for who sends it or where: the login, the ACL, a replica,
    a key of another type, a cluster node that does not own the keys. None for any other
    error."""
    import redis.exceptions as rx

    err: errors.AwsflockError
    if isinstance(
        exc, (rx.AuthenticationError, rx.AuthenticationWrongNumberOfArgsError)
    ) or code in ("WRONGPASS", "NOAUTH"):
        err = errors.CredentialsError(
            f"{where} refused the login: {text}",
            hint="check the user and password (in the URL, or AWSFLOCK_REDIS_PASSWORD)",
        )
        return Translated(err, broken=True)
    # Redis 7.0 answers a command a script may not run with a plain error ("ERR The user
    # executing the script can't run this command..."), not NOPERM.
    if (
        isinstance(exc, rx.NoPermissionError)
        or code == "NOPERM"
        or "user executing the script can't run" in text
    ):
        err = errors.AccessDenied(f"{where} denied {operation}: {text}", hint=acl_hint(prefix))
        return Translated(err, broken=False)
    if isinstance(exc, rx.ReadOnlyError) or code == "READONLY":
        err = errors.StoreError(
            f"{where} is a read-only replica: {text}",
            hint="point --store at the primary (after a failover, at the new one)",
        )
        return Translated(err, broken=True)
    if code == "WRONGTYPE":
        err = errors.TableIncompatible(
            f"a key under prefix {prefix!r} in {where} is not awsflock's (another type): {text}",
            hint="give awsflock a prefix of its own with ?prefix= in the URL (or --tablename)",
        )
        return Translated(err, broken=False)
    if code in ("MOVED", "ASK", "CROSSSLOT"):
        err = errors.StoreError(
            f"{where} is a cluster node that does not own this lock's keys ({text})",
            hint="awsflock speaks to one node: point --store at the shard that owns the lock",
        )
        return Translated(err, broken=False)
    return None
