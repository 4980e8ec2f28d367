"""What the Redis link asks the server of its durability, and how it reads the answers: the
check made once per connection (``ask_check``/``read_check``), the durability wait after a
write step (``ask_wait``/``wait_short``), and the settings read again with every step whose
answer can show a grant (``ask_recheck``/``read_recheck``; ``program.REPORTS_GRANTS``): a grant
is never reported from a server whose settings changed under it (``CONFIG SET appendonly no``
on a server a long-lived holder uses).

``ask_check`` adds its commands to a pipeline (once per connection); ``ask_wait`` and
``ask_recheck`` give commands that ``wire.send`` sends behind the step's script. Each ``read_*``
reads their answers (exceptions among them, in their place). Nothing here sends.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from awsflock.stores.redis import deployment, layout, wire
from awsflock.stores.redis.translate import clears_up

#: The settings a check reads (CONFIG GET), in the order of ``Server``'s fields below.
SETTINGS = (
    "appendonly",
    "appendfsync",
    "maxmemory",
    "maxmemory-policy",
    "no-appendfsync-on-rewrite",
)


def ask_check(pipe: Any, prefix: str) -> None:
    """The connect-time check: INFO server, replication, persistence, the settings, and the
    prefix's layout key (one round trip)."""
    pipe.info("server")
    pipe.info("replication")
    for name in SETTINGS:
        pipe.config_get(name)
    pipe.info("persistence")
    pipe.get(layout.layout_key(prefix))


def read_check(answers: list[Any]) -> tuple[deployment.Server, str | None]:
    """The server's facts and the layout key's value, from ``ask_check``'s answers."""
    server, replication = answers[0], answers[1]
    configs = answers[2 : 2 + len(SETTINGS)]
    persistence, recorded = answers[2 + len(SETTINGS) :]
    for answer in (server, replication, persistence, recorded):
        if isinstance(answer, Exception):
            raise answer
    refused = next((a for a in configs if isinstance(a, Exception)), None)
    if refused is not None and clears_up(refused):
        # Busy or loading is no refusal: the settings are unknown only for now (retried).
        raise refused
    merged: dict[str, Any] = {}
    for answer in configs:
        if isinstance(answer, dict):
            merged.update(answer)
    version = tuple(int(x) for x in str(server.get("redis_version", "0")).split(".")[:3])
    facts = settings(
        deployment.Server(
            version=version,
            role="master",
            replicas=0,
            appendonly=None,
            appendfsync=None,
            uptime_s=float(server.get("uptime_in_seconds", 0)),
        ),
        None if refused else merged,
        replication,
        persistence,
    )
    if refused is not None:
        facts = dataclasses.replace(facts, config_error=str(refused).splitlines()[0])
    text = recorded.decode() if isinstance(recorded, bytes) else recorded
    return facts, text


def settings(
    facts: deployment.Server,
    config: dict[str, Any] | None,
    replication: dict[str, Any],
    persistence: dict[str, Any],
) -> deployment.Server:
    """``facts`` with what CONFIG GET (``config``; None: refused) and INFO said now."""
    known = config is not None
    found = config or {}
    return dataclasses.replace(
        facts,
        role=str(replication.get("role", "master")),
        replicas=_replicas(replication),
        appendonly=_config(found, "appendonly") if known else None,
        appendfsync=_config(found, "appendfsync") if known else None,
        maxmemory=int(_config(found, "maxmemory") or 0) if known else None,
        eviction=_config(found, "maxmemory-policy") if known else None,
        no_fsync_on_rewrite=_config(found, "no-appendfsync-on-rewrite") if known else None,
        aof_rewriting=_aof_rewriting(persistence),
    )


def ask_recheck(facts: deployment.Server) -> list[wire.Command]:
    """The settings again, after a step that can show a grant: one CONFIG GET and one INFO
    where the server takes several names at once (Redis 7), else one of each per name."""
    if facts.version >= (7,):
        return [("CONFIG", "GET", *SETTINGS), ("INFO", "replication", "persistence")]
    return [
        ("CONFIG", "GET", "append*"),
        ("CONFIG", "GET", "maxmemory*"),
        ("CONFIG", "GET", "no-appendfsync-on-rewrite"),
        ("INFO", "replication"),
        ("INFO", "persistence"),
    ]


def read_recheck(before: deployment.Server, answers: list[Any]) -> deployment.Server | str:
    """The facts ``ask_recheck``'s raw answers show, or why they cannot be read."""
    failed = next((a for a in answers if isinstance(a, Exception)), None)
    if failed is not None:
        return str(failed).splitlines()[0]
    config: dict[str, Any] = {}
    info: dict[str, Any] = {}
    for answer in answers:
        if isinstance(answer, list):
            config.update(_pairs(answer))
        else:
            info.update(_info(answer))
    return settings(before, config, info, info)


def recheck_key(answers: list[Any]) -> tuple[Any, ...] | None:
    """What of ``ask_recheck``'s raw answers ``read_recheck`` reads, as a value to compare
    (None: answers it does not remember, an error among them). INFO's other lines (sizes,
    offsets) change with every write; these do not, unless the settings do."""
    key: list[Any] = []
    for answer in answers:
        if isinstance(answer, list):
            key.append(tuple(answer))
        elif isinstance(answer, (bytes, str)):
            key.append(tuple(_INFO_LINE.findall(_text(answer))))
        else:
            return None
    return tuple(key)


def ask_wait(found: deployment.Deployment, wait_ms: int) -> wire.Command:
    """The durability wait after a write step."""
    if found.waitaof:
        return ("WAITAOF", 1, found.replicas, wait_ms)
    return ("WAIT", found.replicas, wait_ms)


def wait_short(found: deployment.Deployment, answer: Any) -> str:
    """What a wait fell short of ("": it did not)."""
    if isinstance(answer, Exception):
        return str(answer).splitlines()[0]
    if found.waitaof:
        local, replicas = (int(x) for x in answer)
        ok = local >= 1 and replicas >= found.replicas
        return "" if ok else f"WAITAOF: fsynced on {local} local, {replicas} replica(s)"
    got = int(answer)
    ok = got >= found.replicas
    return "" if ok else f"WAIT: {got} of {found.replicas} replica(s)"


def _pairs(answer: Any) -> dict[str, Any]:
    """A raw CONFIG GET reply ([name, value, ...] or a dict) as a dict of text."""
    if isinstance(answer, dict):
        items = list(answer.items())
    else:
        items = list(zip(answer[::2], answer[1::2]))
    return {_text(k): _text(v) for k, v in items}


#: The INFO lines a recheck reads (``settings``): the role, the replicas, the AOF's state.
_INFO_LINE = re.compile(
    r"^(role|aof_enabled|aof_rewrite_in_progress|aof_rewrite_scheduled|slave[0-9]+):(.*?)\r?$",
    re.M,
)


def _info(answer: Any) -> dict[str, Any]:
    """The lines of a raw INFO reply (text) that ``settings`` reads, as a dict; ``slaveN``
    values as dicts. (One search: the reply has some forty lines, read with every grant.)"""
    if isinstance(answer, dict):
        return answer
    found: dict[str, Any] = {}
    for name, value in _INFO_LINE.findall(_text(answer)):
        if name.startswith("slave"):
            found[name] = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
        else:
            found[name] = value
    return found


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _config(found: dict[str, Any], name: str) -> str:
    value = found.get(name, "")
    return _text(value)


def _aof_rewriting(persistence: dict[str, Any]) -> bool:
    """Whether INFO persistence shows an AOF rewrite running or scheduled. An AOF turned on
    while the server ran writes to a file no manifest names until its first rewrite is done,
    and nothing in INFO tells that rewrite from a routine one (``aof_base_size`` keeps the
    value of an earlier rewrite): without WAITAOF, every rewrite is waited out."""
    return str(persistence.get("aof_enabled", 0)) == "1" and "1" in (
        str(persistence.get("aof_rewrite_in_progress", 0)),
        str(persistence.get("aof_rewrite_scheduled", 0)),
    )


def _replicas(replication: dict[str, Any]) -> int:
    """The replicas INFO replication lists (``slaveN``), but for those without a listening port
    (0): a backup's ``redis-cli --rdb`` connects as one, and no failover can promote it."""
    listed = [v for k, v in replication.items() if k.startswith("slave") and k[5:].isdigit()]
    return sum(1 for v in listed if not isinstance(v, dict) or str(v.get("port", "")) != "0")
