"""redis-py's errors as awsflock's: every failure of a connect or a command is turned into one of
``awsflock.errors`` here, with the fix named, and nowhere else.

Whether a failed command may still have been applied: only when the connection broke or timed
out after it was sent. An error reply means the server ran nothing of it (the step script makes
every check before its first write, so even its errors change nothing).
"""

from __future__ import annotations

from awsflock import errors
from awsflock.stores.remote.link import Translated, unreachable

#: Error replies that clear up by themselves: retried, never applied.
_TRANSIENT = {
    "BUSY": "busy running a script that has not finished (see SCRIPT KILL)",
    "LOADING": "loading its data set after a start",
    "MASTERDOWN": "cut off from its primary",
    "TRYAGAIN": "in the middle of moving keys between shards",
    "CLUSTERDOWN": "a cluster that is down",
}


#: Error replies that refuse a command outright (nothing applied): code -> the error, its
#: message (with ``where``, ``prefix`` and the reply's ``text``), its hint, and whether the
#: connection is dropped (a replica's: the next try connects anew, maybe to the new primary).
_REFUSALS: dict[str, tuple[type[errors.AwsflockError], str, str, bool]] = {
    "READONLY": (
        errors.StoreError,
        "{where} is a read-only replica: {text}",
        "point --store at the primary (after a failover, at the new one)",
        True,
    ),
    "WRONGTYPE": (
        errors.TableIncompatible,
        "a key under prefix {prefix!r} in {where} is not awsflock's (another type): {text}",
        "give awsflock a prefix of its own with ?prefix= in the URL (or --tablename)",
        False,
    ),
    "OOM": (
        errors.StoreError,
        "{where} is out of memory: {text}",
        "raise maxmemory, or free memory (awsflock's keys must never be evicted: keep "
        "maxmemory-policy noeviction)",
        False,
    ),
}
for _code in ("MOVED", "ASK"):
    _REFUSALS[_code] = (
        errors.StoreError,
        "{where} is a cluster node that does not own this lock's keys ({text})",
        "awsflock speaks to one node: point --store at the shard that owns the lock",
        False,
    )
# A set's step names several locks, whose keys a cluster keeps in different hash slots.
_REFUSALS["CROSSSLOT"] = (
    errors.StoreError,
    "{where} is a cluster node, which cannot take locks kept in different hash slots in one "
    "step ({text})",
    "take one lock at a time there, or keep the locks on one Redis server (not a cluster)",
    False,
)


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
    err: errors.AwsflockError
    if isinstance(
        exc, (rx.AuthenticationError, rx.AuthenticationWrongNumberOfArgsError)
    ) or code in (
        "WRONGPASS",
        "NOAUTH",
    ):
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
    if isinstance(exc, rx.ReadOnlyError):
        code = "READONLY"
    if isinstance(exc, rx.OutOfMemoryError):
        code = "OOM"
    refusal = _REFUSALS.get(code)
    if refusal is not None:
        kind, says, hint, broken = refusal
        message = says.format(where=where, prefix=prefix, text=text)
        return Translated(kind(message, hint=hint), broken)
    if clears_up(exc):
        reason = _TRANSIENT.get(code, _TRANSIENT["LOADING"])
        throttled = errors.Throttled(
            f"{where} refused {operation}: {reason} ({text})", hint="retry"
        )
        return Translated(throttled, broken=isinstance(exc, rx.ConnectionError))
    if isinstance(exc, (rx.ConnectionError, rx.TimeoutError)):
        # Sent and unanswered: the step may have run, with only its answer lost.
        return unreachable(where, text, sent=sent)
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
