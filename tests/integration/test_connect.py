"""``awsflock.connect(url)`` against real servers: the URL a service is given (``--store``'s
form) is all it needs to take, hold and release a lock, and the table the URL names is used."""

from __future__ import annotations

import uuid

import pytest

import awsflock
from awsflock.errors import LockBusy


def _url(request: pytest.FixtureRequest, kind: str) -> str:
    if kind == "postgresql":
        server = request.getfixturevalue("postgres")
        return f"{server.url}?table={request.getfixturevalue('pg_table')}"
    server = request.getfixturevalue("redis_server")
    return f"{server.url}?prefix=awsflock"  # the prefix redis_server made


@pytest.mark.parametrize("kind", ["postgresql", "redis"])
def test_connect_by_url_takes_holds_and_releases_a_lock(request, kind, monkeypatch):
    monkeypatch.delenv("AWSFLOCK_STORE", raising=False)
    url = _url(request, kind)
    app, other = awsflock.connect(url, owner="app"), awsflock.connect(url, owner="other")
    tables = [app, other]
    name = "connect-" + uuid.uuid4().hex[:8]
    try:
        assert app.store.kind == kind and app.skew == 0
        with app.hold(name, lease="30s") as held:
            with pytest.raises(LockBusy) as busy:
                other.acquire(name, wait=0)
            assert busy.value.holder is not None and busy.value.holder.owner == "app"
            assert other.state(name).lease_id == held.lease_id
        taken = other.acquire(name, lease=30, wait=0)  # released when the hold ended
        assert taken.fencing_token > held.fencing_token
        other.release(taken)
        # The same store, named by the variable a deployment sets.
        monkeypatch.setenv("AWSFLOCK_STORE", url)
        tables.append(awsflock.connect())
        assert tables[-1].store.kind == kind and tables[-1].state(name) is not None
    finally:
        for table in tables:
            close = getattr(table.store, "close", None)
            if close is not None:
                close()
