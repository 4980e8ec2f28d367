"""The fencing recipe of docs/how-it-works/fencing.md, run as the page shows it, on in-process
moto: a holder's write is accepted, and a stale holder's is refused and stops it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.docs import recipe


@pytest.fixture
def app_state(moto):
    moto.create_table(
        TableName="app-state",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return moto


def state(client):
    item = client.get_item(TableName="app-state", Key={"pk": {"S": "deploy-prod"}})["Item"]
    return item["state"]["S"], int(item["fence"]["N"])


def test_the_fenced_update_recipe_writes_under_the_lock_and_refuses_a_stale_holder(app_state):
    namespace = {"client": app_state}
    exec(
        compile(recipe("how-it-works/fencing.md", "fenced-update"), "fencing.md", "exec"), namespace
    )
    written, fence = state(app_state)
    assert written == "applied" and fence > 0

    # A holder whose token is older than the one the item has seen is refused, and stops.
    stale = SimpleNamespace(fencing_token=fence - 1)
    with pytest.raises(SystemExit, match="a newer holder"):
        namespace["record_deploy"](app_state, stale, "rolled-back")
    assert state(app_state) == ("applied", fence)

    # The same holder writing again (an equal token) is accepted; a newer one too.
    namespace["record_deploy"](app_state, SimpleNamespace(fencing_token=fence), "verified")
    namespace["record_deploy"](app_state, SimpleNamespace(fencing_token=fence + 1), "done")
    assert state(app_state) == ("done", fence + 1)
