"""fenced_update: the downstream write that refuses stale fencing tokens."""

from __future__ import annotations

import pytest

from awsflock import StaleToken, fenced_update
from awsflock.errors import UsageError


@pytest.fixture
def app_table(moto):
    moto.create_table(
        TableName="app",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return moto


KEY = {"pk": {"S": "deploy"}}


def write(client, token, state):
    return fenced_update(
        client,
        "app",
        KEY,
        token,
        update="SET #s = :s",
        names={"#s": "state"},
        values={":s": {"S": state}},
    )


def test_newer_token_wins_and_a_stale_holder_is_refused(app_table, make_table, clock):
    old = make_table("old").acquire("deploy", lease=10, wait=0)
    clock.advance(16)  # the old holder stalls past its lease; a new one reclaims the lock
    new = make_table("new").acquire("deploy", lease=10, wait=0)
    write(app_table, new.fencing_token, "from-new")
    with pytest.raises(StaleToken) as caught:
        write(app_table, old.fencing_token, "from-old")
    assert caught.value.exit_code == 3
    item = app_table.get_item(TableName="app", Key=KEY)["Item"]
    assert item["state"] == {"S": "from-new"}
    assert int(item["fence"]["N"]) == new.fencing_token


def test_the_same_holder_may_write_again(app_table):
    write(app_table, 5, "a")
    assert write(app_table, 5, "b")["state"] == {"S": "b"}
    assert write(app_table, 6, "c")["fence"] == {"N": "6"}


def test_a_write_without_own_changes_just_records_the_token(app_table):
    assert fenced_update(app_table, "app", KEY, 9)["fence"] == {"N": "9"}


def test_extra_condition_is_anded(app_table):
    write(app_table, 1, "a")
    with pytest.raises(StaleToken):
        fenced_update(
            app_table,
            "app",
            KEY,
            2,
            condition="#s = :want",
            names={"#s": "state"},
            values={":want": {"S": "other"}},
        )


@pytest.mark.parametrize("token", [0, -1, "12", True, None])
def test_bad_tokens_are_refused(app_table, token):
    with pytest.raises(UsageError):
        fenced_update(app_table, "app", KEY, token)
