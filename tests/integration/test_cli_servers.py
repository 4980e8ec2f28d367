"""The real ``awsflock`` executable against moto's server, dynalite and DynamoDB Local over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest

from tests.integration.checks import assert_never_two_holders, run_workers
from tests.integration.conftest import BIN, Cli

#: These tests run on PostgreSQL too (see conftest.py).


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def test_table_create_fresh_then_existing(server, raw_client):
    cli = Cli(server.url, "fresh-" + uuid.uuid4().hex[:6])
    first = cli("table-create")
    assert first.returncode == 0, first.stderr
    assert first.stdout == "" and "ACTIVE" in first.stderr
    if server.name == "dynalite":
        # dynalite 4 has no TTL (UnknownOperationException): a warning, not a failure.
        assert "could not enable TTL" in first.stderr
        # ...and keeps a new table CREATING for about half a second, which we waited out.
        assert "CREATING" in first.stderr
    else:
        assert "TTL enabled on 'expiration_time'" in first.stderr
        # moto and DynamoDB Local make a table ACTIVE at once (DynamoDB: CREATING for seconds)
        # and report TTL ENABLED at once (DynamoDB: ENABLING for a while).
        assert "CREATING" not in first.stderr
        ttl = raw_client.describe_time_to_live(TableName=cli.table)["TimeToLiveDescription"]
        assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expiration_time"}
    again = cli("table-create")
    assert again.returncode == 0 and "already existed" in again.stderr
    alias = cli("create-table", "-q")
    assert (alias.returncode, alias.stdout, alias.stderr) == (0, "", "")
    table = raw_client.describe_table(TableName=cli.table)["Table"]
    assert table["KeySchema"] == [{"AttributeName": "lock_id", "KeyType": "HASH"}]


def test_acquire_renew_release_round_trip(awsflock: Cli, lock_name):
    got = awsflock("acquire", lock_name, "--lease-duration", "300s", "--json")
    assert got.returncode == 0, got.stderr
    lease = json.loads(got.stdout)
    renewed = awsflock(
        "renew", lock_name, lease["lease_id"], "--lease-duration", "15 minutes", "--json"
    )
    assert renewed.returncode == 0, renewed.stderr
    after = json.loads(renewed.stdout)
    assert after["lease_id"] == lease["lease_id"]
    assert after["fencing_token"] == lease["fencing_token"]
    assert after["expires_at"] > lease["expires_at"] + 500  # 15 min from now
    # A shorter renew read within the skew window of that one cannot be ordered after it, so
    # it does not shorten the lease: it holds at least as long as asked, and says so.
    shorter = awsflock("renew", lock_name, lease["lease_id"], "--lease-duration", "60s", "--json")
    assert shorter.returncode == 0, shorter.stderr
    assert json.loads(shorter.stdout)["expires_at"] == pytest.approx(after["expires_at"], abs=0.05)
    released = awsflock("release", lock_name, lease["lease_id"])
    assert (released.returncode, released.stdout, released.stderr) == (0, "", "")
    assert awsflock("renew", lock_name, lease["lease_id"]).returncode == 3


def test_no_wait_exit_codes(awsflock: Cli, lock_name):
    assert awsflock("acquire", lock_name, "--no-wait", "--owner", "first").returncode == 0
    busy = awsflock("acquire", lock_name, "--no-wait")
    assert busy.returncode == 3 and busy.stdout == ""
    assert "first" in one_line(busy.stderr)
    assert awsflock("acquire", lock_name, "--no-wait", "--conflict-exit-code", "0").returncode == 0


def test_waiter_gets_the_lock_about_a_second_after_release(awsflock: Cli, lock_name):
    lease = awsflock("acquire", lock_name).stdout.strip()
    waiter = awsflock.popen("acquire", lock_name, "--wait-time", "30")
    # Waiting once it says so, and then for a poll or so (not a fixed 2.5 s from its start,
    # most of which was the process starting).
    said = waiter.stderr.readline() if waiter.stderr else ""
    assert "waiting up to 30s" in said, said
    time.sleep(1.0)
    assert waiter.poll() is None, "the waiter must still be waiting"
    released_at = time.monotonic()
    assert awsflock("release", lock_name, lease).returncode == 0
    out, err = waiter.communicate(timeout=30)
    handoff = time.monotonic() - released_at
    assert waiter.returncode == 0, err
    assert out.strip() != lease
    assert handoff < 5, f"hand-off took {handoff:.1f}s"


@pytest.mark.one_server_per_kind("what the command says when its wait runs out")
def test_wait_time_runs_out_with_exit_3(awsflock: Cli, lock_name):
    awsflock("acquire", lock_name)
    start = time.monotonic()
    result = awsflock("acquire", lock_name, "--wait-time", "2s")
    assert result.returncode == 3
    assert time.monotonic() - start >= 2
    # Two lines: the wait begins (the holder, and for how long it waits), then gives up.
    waiting, gave_up = result.stderr.splitlines()
    assert "is held by" in waiting and waiting.endswith("; waiting up to 2s")
    assert "gave up after 2" in gave_up


@pytest.mark.needs("skew_window", "test_postgres.py reclaims at expiry where there is none")
def test_expired_lease_is_reclaimed_after_lease_plus_skew(awsflock: Cli, lock_name):
    start = time.monotonic()
    assert awsflock("acquire", lock_name, "--lease-duration", "2s").returncode == 0
    got = awsflock("acquire", lock_name, "--skew", "1s", "--wait-time", "20", "-v")
    elapsed = time.monotonic() - start
    assert got.returncode == 0, got.stderr
    assert elapsed >= 3, "reclaimed before lease + skew"
    assert "reclaimed" in got.stderr


def test_fencing_tokens_rise_across_release_reclaim_and_deletion(
    awsflock: Cli, raw_client, lock_name
):
    def token(*extra: str) -> dict:
        result = awsflock("acquire", lock_name, "--json", *extra)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    first = token()
    awsflock("release", lock_name, first["lease_id"])
    second = token("--lease-duration", "1s")
    time.sleep(1.2)
    third = token("--skew", "0s")  # reclaims the expired second lease
    awsflock("release", lock_name, third["lease_id"])
    time.sleep(0.01)
    raw_client.delete_item(TableName=awsflock.table, Key={"lock_id": {"S": lock_name}})
    fourth = token()
    tokens = [
        first["fencing_token"],
        second["fencing_token"],
        third["fencing_token"],
        fourth["fencing_token"],
    ]
    assert tokens == sorted(set(tokens)), tokens
    assert all(0 < t < 2**63 for t in tokens)


def test_processes_contending_never_hold_at_once(awsflock: Cli, lock_name, tmp_path):
    counter, log = tmp_path / "counter", tmp_path / "holds.jsonl"
    counter.write_text("0")
    run_workers(
        BIN,
        awsflock.env(),
        lock_name,
        counter,
        log,
        3,
        3,
        "--wait-time",
        "60",
        "--lease-duration",
        "30s",
    )
    assert_never_two_holders(log, counter, expected=9)


def test_missing_table_is_one_line_exit_1(server, lock_name):
    result = Cli(server.url, "no-such-table")("acquire", lock_name)
    assert result.returncode == 1
    assert "awsflock table-create --tablename no-such-table" in one_line(result.stderr)


def test_unreachable_endpoint_is_one_line_exit_1(lock_name):
    from tests.servers import free_port

    result = Cli(f"http://127.0.0.1:{free_port()}", "t")("acquire", lock_name, "--no-wait")
    assert result.returncode == 1
    assert "cannot reach DynamoDB" in one_line(result.stderr)


def test_wrong_lease_is_refused_with_exit_3(awsflock: Cli, lock_name):
    awsflock("acquire", lock_name)
    wrong = "7" * 8 + "-7777-4777-8777-" + "7" * 12
    for command in ("renew", "release"):
        result = awsflock(command, lock_name, wrong)
        assert result.returncode == 3
        assert "does not hold" in one_line(result.stderr)


def test_loopback_endpoint_needs_no_credentials_or_region(
    server, shared_table, raw_client, lock_name
):
    # No AWS_* variables and no ~/.aws files at all: harmless local defaults are used because the
    # endpoint is local, with a key DynamoDB Local accepts (letters and digits only).
    result = Cli(server.url, shared_table)("acquire", lock_name, "--no-wait")
    assert result.returncode == 0, result.stderr
    # It is the key the suite's own client uses: on DynamoDB Local, which keeps tables per key,
    # the lock is in the same table.
    key = {"lock_id": {"S": lock_name}}
    assert raw_client.get_item(TableName=shared_table, Key=key, ConsistentRead=True)["Item"]


def test_loopback_endpoint_uses_the_credentials_file_and_profile(
    server, tmp_path, raw_client, lock_name
):
    # Credentials from a file (here through AWS_PROFILE) win over awsflock's loopback default.
    creds = tmp_path / "credentials"
    creds.write_text("[ci]\naws_access_key_id = profilekey1\naws_secret_access_key = s\n")
    cli = Cli(server.url, "creds-" + uuid.uuid4().hex[:6])
    env = {"AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_PROFILE": "ci"}
    made = cli("table-create", "-q", **env)
    assert (made.returncode, made.stderr) == (0, "")
    got = cli("acquire", lock_name, "--no-wait", **env)
    assert got.returncode == 0, got.stderr
    assert cli("release", lock_name, got.stdout.strip(), **env).returncode == 0
    if server.name == "dynamodb_local":
        # DynamoDB Local keeps tables per access key: the file's key made this table, so
        # awsflock's default key (the suite's client) does not see it.
        assert cli.table not in raw_client.list_tables()["TableNames"]
        assert cli("status", lock_name).returncode == 1


# -- where the servers differ from each other or from DynamoDB ---------------------------------


def _failed_update(raw_client, table: str, key: str):
    from botocore.exceptions import ClientError

    raw_client.put_item(TableName=table, Item={"lock_id": {"S": key}, "x": {"N": "1"}})
    with pytest.raises(ClientError) as caught:
        raw_client.update_item(
            TableName=table,
            Key={"lock_id": {"S": key}},
            UpdateExpression="SET x = :two",
            ConditionExpression="attribute_not_exists(lock_id)",
            ExpressionAttributeValues={":two": {"N": "2"}},
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    return caught.value.response


def test_pinned_return_values_on_condition_check_failure(
    server, raw_client, shared_table, lock_name
):
    response = _failed_update(raw_client, shared_table, lock_name)
    assert response["Error"]["Code"] == "ConditionalCheckFailedException"
    if server.name == "dynalite":
        # dynalite 4.0.0 ignores the parameter: no old item. awsflock then reads it once.
        assert "Item" not in response
    else:
        # moto and DynamoDB Local (since 1.25.0) return the old item, as DynamoDB documents.
        assert response["Item"]["x"] == {"N": "1"}


def test_pinned_update_expressions_read_the_old_item(server, raw_client, shared_table, lock_name):
    # Every server, like DynamoDB, evaluates every operand of a SET against the item as it was
    # before the update; the lease history (h0_*..h2_*, shifted by each grant) relies on this.
    raw_client.put_item(
        TableName=shared_table, Item={"lock_id": {"S": lock_name}, "a": {"S": "old"}}
    )
    new = raw_client.update_item(
        TableName=shared_table,
        Key={"lock_id": {"S": lock_name}},
        UpdateExpression="SET a = :new, b = if_not_exists(a, :none)",
        ExpressionAttributeValues={":new": {"S": "new"}, ":none": {"NULL": True}},
        ReturnValues="ALL_NEW",
    )["Attributes"]
    assert new["a"] == {"S": "new"} and new["b"] == {"S": "old"}
    # The history's exact shape: shift oldest first, copy an attribute that the same update
    # REMOVEs. (moto applies SET clauses in order, so the order matters there.)
    raw_client.put_item(
        TableName=shared_table,
        Item={
            "lock_id": {"S": lock_name},
            "h0": {"S": "A"},
            "lease": {"S": "B"},
            "ended": {"S": "released"},
        },
    )
    new = raw_client.update_item(
        TableName=shared_table,
        Key={"lock_id": {"S": lock_name}},
        UpdateExpression="SET h1 = if_not_exists(h0, :n), h0 = if_not_exists(lease, :n),"
        " h0e = if_not_exists(ended, :n), lease = :c REMOVE ended",
        ExpressionAttributeValues={":n": {"NULL": True}, ":c": {"S": "C"}},
        ReturnValues="ALL_NEW",
    )["Attributes"]
    assert (new["h1"], new["h0"], new["h0e"], new["lease"]) == (
        {"S": "A"},
        {"S": "B"},
        {"S": "released"},
        {"S": "C"},
    )
    assert "ended" not in new


def test_pinned_numbers_over_38_digits(server, raw_client, shared_table, lock_name):
    from botocore.exceptions import ClientError

    big = "1" * 40
    item = {"lock_id": {"S": lock_name}, "n": {"N": big}}
    if server.name == "moto":
        # moto accepts what DynamoDB refuses; awsflock's tokens stay far below (about 1.8e15).
        raw_client.put_item(TableName=shared_table, Item=item)
    else:
        with pytest.raises(ClientError):
            raw_client.put_item(TableName=shared_table, Item=item)


def test_pinned_ttl_deletion_and_expired_items_are_reclaimed(
    server, awsflock: Cli, raw_client, lock_name
):
    # moto never deletes TTL-expired items and dynalite has no TTL. DynamoDB Local deletes them
    # for real, and fast: a sweep about every 10 s (measured: expired items gone 1 to 21 s after
    # their expiration_time; DynamoDB takes up to days). The lock depends on neither: an expired
    # item is simply taken over, and a deleted one is recreated.
    raw_client.put_item(
        TableName=awsflock.table,
        Item={
            "lock_id": {"S": lock_name},
            "lease_id": {"S": "8" * 8 + "-8888-4888-8888-" + "8" * 12},
            "owner": {"S": "long-gone"},
            "lease_duration": {"N": "10"},
            "expiration_time": {"N": str(int(time.time()) - 3600)},
        },
    )
    key = {"lock_id": {"S": lock_name}}

    def present() -> bool:
        return "Item" in raw_client.get_item(TableName=awsflock.table, Key=key, ConsistentRead=True)

    if server.name == "dynamodb_local":
        deadline = time.monotonic() + 45
        while present() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not present(), "DynamoDB Local did not delete the expired item within 45 s"
    else:
        time.sleep(0.5)
        assert present()
    assert awsflock("acquire", lock_name, "--no-wait").returncode == 0


def test_pinned_dynamodb_local_keeps_tables_per_access_key(server, awsflock: Cli, lock_name):
    # Not started with -sharedDb, DynamoDB Local keeps one set of tables per access key id (and
    # region): another key sees no table. It refuses an access key id that is not letters and
    # digits, such as awsflock's own loopback default used to be ("awsflock-local").
    other = awsflock("status", lock_name, AWS_ACCESS_KEY_ID="otherkey", AWS_SECRET_ACCESS_KEY="s")
    dashed = awsflock(
        "status", lock_name, AWS_ACCESS_KEY_ID="awsflock-local", AWS_SECRET_ACCESS_KEY="s"
    )
    if server.name == "dynamodb_local":
        assert other.returncode == 1 and "does not exist" in one_line(other.stderr)
        assert dashed.returncode == 1
        assert "AWS rejected the credentials (UnrecognizedClientException)" in one_line(
            dashed.stderr
        )
    else:
        # moto and dynalite accept any key and share their tables among all of them.
        assert (other.returncode, dashed.returncode) == (3, 3)  # the lock is free


def _racing_conditional_writes(endpoint: str, trials: int) -> int:
    """How many of ``trials`` pairs of concurrent take-if-free updates both succeeded."""
    import threading

    from tests.servers import local_client

    def client():
        return local_client(endpoint)

    setup = client()
    table = "race-" + uuid.uuid4().hex[:6]
    setup.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    while setup.describe_table(TableName=table)["Table"]["TableStatus"] != "ACTIVE":
        time.sleep(0.1)
    racers = [client(), client()]
    doubles = 0
    for _ in range(trials):
        key, wins = uuid.uuid4().hex, []
        barrier = threading.Barrier(2)

        def go(racer, me: str, key: str = key, wins: list = wins, barrier=barrier) -> None:
            barrier.wait()
            try:
                # The shape of a pool slot's acquire: take slot 1 if unused, count the grant.
                racer.update_item(
                    TableName=table,
                    Key={"pk": {"S": key}},
                    UpdateExpression="SET s1_lease = :me, s1_prev = if_not_exists(s1_lease, :none),"
                    " s1_fence = if_not_exists(s1_fence, :zero) + :one",
                    ConditionExpression="(attribute_not_exists(s1_lease) OR s1_released = :yes)"
                    " AND (attribute_not_exists(slots) OR slots = :two)",
                    ExpressionAttributeValues={
                        ":me": {"S": me},
                        ":none": {"NULL": True},
                        ":zero": {"N": "0"},
                        ":one": {"N": "1"},
                        ":yes": {"BOOL": True},
                        ":two": {"N": "2"},
                    },
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
                wins.append(me)
            except racer.exceptions.ConditionalCheckFailedException:
                pass

        threads = [threading.Thread(target=go, args=(r, str(i))) for i, r in enumerate(racers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        doubles += len(wins) > 1
        if doubles and trials > 100:
            break  # shown; no need to go on
    return doubles


def test_pinned_conditional_writes_are_atomic_under_concurrency(server):
    # DynamoDB serialises writes to an item: of two concurrent take-if-free writes exactly one
    # wins. dynalite does the same, and so does moto's app as awsflock dev-server serves it
    # (one request at a time), which is the "moto" server of this suite.
    assert _racing_conditional_writes(server.url, 150) == 0


def test_pinned_moto_threaded_server_is_not_atomic():
    # moto's own server (`moto_server`, threaded) evaluates a condition and applies the update
    # non-atomically: two concurrent writes can both pass (measured here: 16 of 300 pairs). That
    # is why this suite and `awsflock dev-server` serve moto's app one request at a time.
    from tests.servers import ThreadedMotoServer

    threaded = ThreadedMotoServer().start()
    try:
        assert _racing_conditional_writes(threaded.url, 1500) >= 1
    finally:
        threaded.stop()


@pytest.mark.one_server_per_kind("the command's output to a closed pipe")
def test_an_acquire_whose_lease_id_cannot_be_written_gives_the_lock_back(awsflock: Cli, lock_name):
    # Found by the adversarial review: with stdout a pipe nobody reads, acquire exited 1 with
    # nothing said and the lock held for its whole lease, under a LEASE_ID nobody has.
    import os
    import subprocess

    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [str(BIN), "acquire", lock_name],
            stdout=write,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=awsflock.env(),
            timeout=60,
        )
    finally:
        os.close(write)
    assert done.returncode == 1
    assert "could not write the LEASE_ID to stdout" in one_line(done.stderr)
    assert awsflock("acquire", lock_name, "--no-wait").returncode == 0


@pytest.mark.one_server_per_kind("the command's exit status with a closed stream")
@pytest.mark.parametrize("closed", ["2>&-", ">&-"])
def test_a_closed_stream_keeps_run_and_acquire_exit_statuses(awsflock: Cli, lock_name, closed):
    # Found by the adversarial review of the exit without teardown: a closed stdout or stderr
    # made every command exit 1 (`run` lost its command's status; `acquire` said it failed with
    # the lock held).
    import subprocess

    script = (
        f"'{BIN}' run {lock_name} -- sh -c 'exit 7' {closed}; echo run=$?; "
        f"'{BIN}' acquire {lock_name}-2 2>&- >/dev/null; echo acquire=$?"
    )
    done = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, env=awsflock.env(), timeout=120
    )
    assert done.stdout.split() == ["run=7", "acquire=0"], done.stderr


@pytest.mark.one_server_per_kind("the pid and command the CLI records for its holder")
def test_a_plain_acquire_records_the_script_that_ran_it_as_the_holder(awsflock: Cli, tmp_path):
    # The acquire process is gone once the LEASE_ID is printed; the script lives on with the
    # lease, so its pid is the one an operator's "is the holder alive?" check must find.
    script = tmp_path / "deploy.sh"
    script.write_text(
        f'#!/bin/bash\nLEASE=$("{BIN}" acquire pid-of-script)\necho "$$"\n'
        f'"{BIN}" status pid-of-script --json\n'
    )
    script.chmod(0o755)
    done = subprocess.run(
        [str(script)], capture_output=True, text=True, timeout=60, env=awsflock.env()
    )
    assert done.returncode == 0, done.stderr
    pid, status = done.stdout.split("\n", 1)
    holder = json.loads(status)
    assert holder["pid"] == int(pid) and holder["command"] == "deploy.sh"


@pytest.mark.one_server_per_kind("the command's output to a closed pipe")
@pytest.mark.parametrize(
    ("words", "status"),
    [(["list"], 0), (["list", "--json"], 0), (["status", "never-taken"], 3)],
)
def test_a_reader_that_closed_the_pipe_is_no_failure(awsflock: Cli, lock_name, words, status):
    # `awsflock list | head -1` under `set -o pipefail`: the reader took what it wanted.
    assert awsflock("acquire", lock_name).returncode == 0
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [str(BIN), *words],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env=awsflock.env(),
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (status, "")
