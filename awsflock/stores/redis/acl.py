"""The ACL rules a Redis 6.2+ user needs for awsflock's keys and channels: the counterpart of
DynamoDB's IAM policy and PostgreSQL's GRANTs. Scripts run their commands with the caller's
permissions, so the commands the step script calls are listed too."""

from __future__ import annotations

#: What every command of awsflock sends, or its script calls: the connect-time check (INFO,
#: CONFIG GET), the steps (EVALSHA, falling back to EVAL; TIME and the hash commands inside),
#: list (SCAN), audit and the layout key (GET), and SELECT for a database other than 0.
READ = (
    "info",
    "config|get",
    "select",
    "evalsha",
    "eval",
    "time",
    "hgetall",
    "type",
    "hmget",
    "scan",
    "get",
)
#: What taking, renewing and releasing add: the writes of the script, the durability wait, the
#: audit records and the layout key, and table-create's SCRIPT LOAD; the script's PUBLISH on the
#: lock's channel when it may let a waiter in, and a waiter's SUBSCRIBE to it (without them
#: waiters only poll).
WRITE = (
    "hset",
    "hget",
    "hdel",
    "zscore",
    "zadd",
    "zremrangebyscore",
    "pexpireat",
    "persist",
    "wait",
    "set",
    "script|load",
    "publish",
    "subscribe",
    "unsubscribe",
)


def rules(prefix: str, *, read_only: bool) -> str:
    """The rules of ``ACL SETUSER``, after the user's name and password: only the prefix's keys
    and channels (the waiters' wake-ups; none for ``read_only``: status, list and audit), only
    the commands awsflock uses."""
    commands = READ if read_only else READ + WRITE
    channels = "resetchannels" if read_only else f"resetchannels &{prefix}:*"
    return f"~{prefix}:* {channels} -@all " + " ".join("+" + c for c in commands)


def acl(prefix: str, user: str, *, read_only: bool) -> str:
    """The ``ACL SETUSER`` commands (for redis-cli) that give ``user`` what awsflock needs on
    keys under ``prefix``."""
    lines = [
        f"# awsflock: what Redis user {user} needs on keys under {prefix}:"
        + (" (status, list, audit only)" if read_only else ""),
        f"ACL SETUSER {user} on resetkeys {rules(prefix, read_only=read_only)}",
    ]
    if not read_only:
        lines += [
            "# Redis 7.2+ and Valkey, whose WAITAOF awsflock uses to wait for the fsync:",
            f"ACL SETUSER {user} +waitaof",
        ]
    lines += [
        f"# and a password: ACL SETUSER {user} >PASSWORD (then ACL SAVE, or CONFIG REWRITE)",
    ]
    return "\n".join(lines)
