"""Set-up of a Redis store's key prefix (``table-create``): the step script loaded and the
layout's version recorded under the prefix, once, by whichever creator comes first."""

from __future__ import annotations

from typing import Any, Callable

from awsflock import errors
from awsflock.stores.redis import layout
from awsflock.stores.redis.link import RedisConn


def create_layout(
    prefix: str,
    where: str,
    send: Callable[[str, Callable[[RedisConn], Any]], Any],
    progress: Callable[[str], None],
) -> bool:
    """Load the step script and record the layout's version under ``prefix`` through ``send``
    (the store's request layer); True if it was recorded now. A prefix whose layout key holds
    anything else is refused."""
    key = layout.layout_key(prefix)

    def work(conn: RedisConn) -> tuple[bool, Any]:
        client = conn.client
        client.script_load(layout.script())
        created = bool(client.set(key, layout.LAYOUT, nx=True))
        conn.layout = found = client.get(key)
        if isinstance(found, bytes):
            conn.layout = found.decode()
        return created, found

    created, found = send("create_table", work)
    found_text = found.decode() if isinstance(found, bytes) else found
    if found_text != layout.LAYOUT:
        raise errors.TableIncompatible(
            f"prefix {prefix!r} in {where} holds another layout ({key} is "
            f"{found_text!r}, not {layout.LAYOUT!r})",
            hint="name another prefix with ?prefix= in --store (or --tablename)",
        )
    verb = "recorded" if created else "found"
    progress(f"{verb} awsflock's layout under prefix {prefix!r} in {where}")
    return bool(created)
