"""The GitHub Action (action.yml, action/dist/*.js) run as the runner runs it: node with the
runner's variables and files, each step a child of a worker process that lives as long as the
job (tests/integration/action_runner.py), against the dev server and PostgreSQL. Jobs contend,
are cancelled while holding and while waiting, lose their runner, check without taking, give up
waiting, and queue in order."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.action_runner import ROOT, Job
from tests.integration.conftest import BIN, Cli, UrlCli
from tests.servers import PostgresServer

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="the action runs on node")

#: The action's lease in these tests: long enough for a loaded machine, short enough to wait
#: out. DynamoDB's default skew window (5 s) follows it when a runner dies.
LEASE = 4.0
SKEW = {"dev_server": 5.0, "postgresql": 0.0}


@dataclass
class Store:
    name: str
    cli: Cli  # awsflock pointed at the same table, for the test's own looks
    env: dict[str, str]  # the job's environment (endpoint, no AWS files)
    inputs: dict[str, str]  # the action's store inputs

    def status(self, lock: str) -> dict[str, Any]:
        done = self.cli("status", "--json", "--", lock)
        assert done.returncode in (0, 3), done.stderr
        return dict(json.loads(done.stdout))


@pytest.fixture(scope="module")
def dev_server() -> Iterator[str]:
    """``awsflock dev-server``: the endpoint a user tries the action against first."""
    with subprocess.Popen(
        [str(BIN), "dev-server", "--port", "0", "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        try:
            yield proc.stdout.readline().strip().split("=", 1)[1]
        finally:
            proc.kill()


#: The action's stores: one of each kind with a server of its own (DynamoDB's, the dev server,
#: is moto's), as for the CLI's tests of what it does around the store
#: (``one_server_per_kind``): the action sees only awsflock's output, not the server behind it,
#: and each DynamoDB server's own behaviour is the conformance suite's.
@pytest.fixture(params=["dev_server", "postgresql"])
def store(request: pytest.FixtureRequest) -> Store:
    table = "act_" + uuid.uuid4().hex[:8]
    path = f"{BIN.parent}{os.pathsep}{os.environ['PATH']}"
    if request.param == "postgresql":
        pg: PostgresServer = request.getfixturevalue("postgres")
        url = f"{pg.store_url}?table={table}"
        cli: Cli = UrlCli(pg, table, url)
        inputs = {"store": url}
    else:
        cli = Cli(request.getfixturevalue("dev_server"), table)
        inputs = {"table": table}
    assert cli("table-create", "-q").returncode == 0
    env = cli.env(PATH=path)
    for name in ("AWSFLOCK_TABLE", "AWSFLOCK_STORE"):
        env.pop(name, None)  # the action's inputs name them
    return Store(request.param, cli, env, inputs)


@pytest.fixture
def jobs(store: Store, tmp_path: Path) -> Iterator[Callable[..., Job]]:
    made: list[Job] = []

    def job(job_name: str, /, **inputs: str) -> Job:
        given = {**store.inputs, "lease": f"{LEASE:g}s", **inputs}
        made.append(Job(tmp_path / job_name, store.env, given, job_name))
        return made[-1]

    yield job
    for j in made:
        j.die()


def wait_for(what: str, predicate, timeout: float = 30.0, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


def in_line(store: Store, lock: str) -> int:
    return len(store.status(lock).get("line", []))


def test_two_jobs_hand_the_lock_over_and_say_who_holds_it(store: Store, jobs, lock_name):
    a, b = jobs("alpha", name=lock_name), jobs("beta", name=lock_name)
    taken = a.run("main")
    assert taken.code == 0, a.logs()
    assert taken.outputs["acquired"] == "true"
    token = int(taken.outputs["fencing-token"])
    assert a.exported["AWSFLOCK_FENCING_TOKEN"] == str(token)
    assert a.exported["AWSFLOCK_LOCK_ID"] == lock_name
    lease_id = a.state["lease-id"]
    # The LEASE_ID is in the action's state only: no output, no variable, no log line has it.
    assert lease_id not in json.dumps([taken.outputs, a.exported]) + taken.text.replace(
        f"::add-mask::{lease_id}", ""
    )

    waiting = b.start("main")
    wait_for("beta in line", lambda: in_line(store, lock_name) == 1)
    # A step of alpha's that outlasts the lease: the renewer follows the job, not the step.
    work = a.run("run", f'sleep {LEASE * 1.5}; echo "token $AWSFLOCK_FENCING_TOKEN"')
    assert work.code == 0 and f"token {token}" in work.text
    assert store.status(lock_name)["state"] == "held"
    wait_for("a progress line", lambda: "place 1 of 1 in line" in waiting.text, timeout=20)
    assert a.run("post").code == 0
    b.finish(waiting)
    assert waiting.code == 0, b.logs()
    assert int(waiting.outputs["fencing-token"]) > token
    holder = json.loads(waiting.outputs["holder"])
    assert holder["owner"] == "octo/alpha: Deploy / alpha (mona, main)"
    assert holder["ci_url"] == a.run_url
    assert float(waiting.outputs["waited-seconds"]) >= LEASE
    said = waiting.text
    assert "octo/alpha: Deploy / alpha (mona, main)" in said and a.run_url in said
    assert "lease expires in" in said and "held for" in said
    summary = waiting.summary
    assert f"`{lock_name}` held by this job" in summary
    assert (
        "Hand-off" in summary
        and "octo/alpha" in summary
        and waiting.outputs["fencing-token"] in summary
    )
    released = b.run("post")
    assert released.code == 0 and f"released '{lock_name}'" in released.text
    assert store.status(lock_name)["state"] == "free"
    # post is idempotent: run again, it gives back nothing more and fails nothing.
    assert b.run("post").code == 0


def test_a_job_cancelled_while_holding_frees_the_lock_in_its_post_step(
    store: Store, jobs, lock_name
):
    a = jobs("alpha", name=lock_name)
    assert a.run("main").code == 0
    work = a.start("run", "sleep 60")
    a.cancel(work)
    assert a.run("post").code == 0
    assert store.status(lock_name)["state"] == "free"


def test_a_job_cancelled_while_waiting_leaves_the_line_and_releases_nothing(
    store: Store, jobs, lock_name
):
    a, b = jobs("alpha", name=lock_name), jobs("beta", name=lock_name)
    assert a.run("main").code == 0
    waiting = b.start("main")
    wait_for("beta in line", lambda: in_line(store, lock_name) == 1)
    started = time.monotonic()
    b.cancel(waiting)
    # SIGINT alone ended the wait (no need of the SIGTERM 7.5 s later).
    assert waiting.code != 0 and time.monotonic() - started < 7, b.logs()
    assert "cancelled while waiting" in waiting.text
    assert "lease-id" not in b.state
    post = b.run("post")
    assert post.code == 0 and "never held" in post.text
    status = store.status(lock_name)
    assert status["state"] == "held" and status["owner"].startswith("octo/alpha")
    assert "line" not in status
    assert a.run("post").code == 0


@pytest.mark.parametrize("lost", ["runner", "machine"])
def test_a_runner_that_dies_holding_frees_the_lock(store: Store, jobs, lock_name, lost):
    # "runner": the worker and its steps are killed, the renewer sees the job gone and gives
    # the lease back at once. "machine": the renewer goes too; nobody renews, and the lock is
    # free within the lease plus the skew window, with no human and no "stale after" rule.
    a = jobs("alpha", name=lock_name)
    assert a.run("main").code == 0
    keeper = store.status(lock_name)["kept_alive_by"]
    renewer = int(keeper.split("pid ")[1].split(",")[0])
    a.die()
    if lost == "machine":
        os.kill(renewer, 9)
    started = time.monotonic()
    bound = LEASE + SKEW[store.name] + 3.0
    if lost == "runner":
        # The renewer ends the lease itself: the lock turns free, never "expired" (which a lease
        # left to run out shows first), however loaded the machine (a bound of 3 s on the next
        # job's grant failed a CI run on a loaded machine: 3.9 s).
        state = store.status(lock_name)["state"]
        while state == "held" and time.monotonic() < started + bound:
            time.sleep(0.1)
            state = store.status(lock_name)["state"]
        assert state == "free", f"the renewer did not end the lease: the lock is {state}"
    other = jobs("beta", name=lock_name, wait="60s")
    got = other.run("main")
    assert got.code == 0, other.logs()
    took = time.monotonic() - started
    assert took < bound, took
    other.run("post")


def test_mode_check_looks_without_taking(store: Store, jobs, lock_name):
    free = jobs("plan-free", name=lock_name, mode="check").run("main")
    assert free.code == 0 and free.outputs["held"] == "false", free.text
    assert store.status(lock_name)["state"] == "free"
    a = jobs("apply", name=lock_name)
    assert a.run("main").code == 0
    failing = jobs("plan", name=lock_name, mode="check").run("main")
    assert failing.code == 1 and failing.outputs["held"] == "true"
    assert "::error::" in failing.text and "octo/apply" in failing.text
    told = jobs("plan2", name=lock_name, mode="check", **{"fail-if-held": "false"}).run("main")
    assert told.code == 0 and told.outputs["held"] == "true"
    assert json.loads(told.outputs["holder"])["owner"].startswith("octo/apply")
    assert store.status(lock_name)["owner"].startswith("octo/apply")
    assert a.run("post").code == 0


def test_a_wait_that_runs_out_fails_the_step(store: Store, jobs, lock_name):
    a = jobs("alpha", name=lock_name)
    assert a.run("main").code == 0
    b = jobs("beta", name=lock_name, wait="2s")
    gave_up = b.run("main")
    assert gave_up.code == 1 and gave_up.outputs["acquired"] == "false"
    assert f"::error::gave up waiting for '{lock_name}'" in gave_up.text
    assert b.run("post").code == 0
    assert store.status(lock_name)["owner"].startswith("octo/alpha")
    assert a.run("post").code == 0


def test_three_queued_jobs_are_served_in_order_of_arrival(store: Store, jobs, lock_name):
    a = jobs("alpha", name=lock_name)
    assert a.run("main").code == 0
    queued = []
    for n, name in enumerate(["beta", "gamma", "delta"], start=1):
        job = jobs(name, name=lock_name)
        queued.append((job, job.start("main")))
        wait_for(f"{name} in line", lambda n=n: in_line(store, lock_name) == n)
    assert a.run("post").code == 0
    tokens = []
    for job, main in queued:
        job.finish(main)
        assert main.code == 0, job.logs()
        tokens.append(int(main.outputs["fencing-token"]))
        assert job.run("post").code == 0
    assert tokens == sorted(tokens)


def test_a_pool_gives_each_job_its_slot(store: Store, jobs, lock_name):
    a, b = jobs("alpha", name=lock_name, slots="2"), jobs("beta", name=lock_name, slots="2")
    first, second = a.run("main"), b.run("main")
    assert first.code == 0 and second.code == 0, a.logs() + b.logs()
    slots = {first.outputs["slot"], second.outputs["slot"]}
    assert slots == {"0", "1"}
    assert {a.exported["AWSFLOCK_SLOT"], b.exported["AWSFLOCK_SLOT"]} == slots
    assert a.run("post").code == 0 and b.run("post").code == 0


def test_plan_jobs_share_the_lock_and_an_apply_job_waits_for_them(store: Store, jobs, lock_name):
    a, b = (
        jobs("plan-a", name=lock_name, shared="true"),
        jobs("plan-b", name=lock_name, shared="true"),
    )
    first, second = a.run("main"), b.run("main")
    assert first.code == 0 and second.code == 0, a.logs() + b.logs()
    assert a.exported["AWSFLOCK_SHARED"] == b.exported["AWSFLOCK_SHARED"] == "1"
    tokens = [int(first.outputs["fencing-token"]), int(second.outputs["fencing-token"])]
    assert len(store.status(lock_name)["shares"]) == 2
    apply_job = jobs("apply", name=lock_name)
    waiting = apply_job.start("main")
    wait_for("the apply job's claim", lambda: store.status(lock_name)["exclusive_waiting"])
    late = jobs("plan-c", name=lock_name, shared="true", wait="2s").run("main")
    assert late.code == 1, late.text  # kept out while the apply job waits
    assert a.run("post").code == 0 and b.run("post").code == 0
    apply_job.finish(waiting)
    assert waiting.code == 0, apply_job.logs()
    assert apply_job.exported["AWSFLOCK_SHARED"] == "0"
    assert int(waiting.outputs["fencing-token"]) > max(tokens)
    assert apply_job.run("post").code == 0


def test_jobs_naming_several_locks_take_them_whole_in_any_order(store: Store, jobs, lock_name):
    net, db = f"{lock_name}-network", f"{lock_name}-db"
    first, second = jobs("alpha", names=f"{net}\n{db}\n"), jobs("beta", names=f"{db}\n{net}")
    taken = first.run("main")
    assert taken.code == 0, first.logs()
    tokens = json.loads(taken.outputs["fencing-tokens"])
    assert set(tokens) == {net, db} and "fencing-token" not in taken.outputs
    assert first.exported["AWSFLOCK_LOCKS"] == "2"
    assert first.exported["AWSFLOCK_LOCK_ID"] == f"{net}\n{db}"
    assert (first.exported["AWSFLOCK_LOCK_ID_2"], first.exported["AWSFLOCK_FENCING_TOKEN_2"]) == (
        db,
        str(tokens[db]),
    )
    assert "AWSFLOCK_FENCING_TOKEN" not in first.exported
    assert f"acquired '{net}', '{db}' (fencing tokens {net} {tokens[net]}, {db}" in taken.text
    waiting = second.start("main")  # the same locks named the other way round: it waits whole
    wait_for("a progress line", lambda: f"'{db}' held by octo/alpha" in waiting.text, 20)
    assert store.status(db)["owner"].startswith("octo/alpha")  # beta holds neither meanwhile
    looked = jobs("look", names=f"{db}\n{net}", mode="check").run("main")
    assert looked.code == 1 and looked.outputs["held"] == "true", looked.text
    assert f"::error::locks '{db}', '{net}': '{db}' held: octo/alpha" in looked.text
    released = first.run("post")
    assert released.code == 0 and f"released '{net}', '{db}'" in released.text
    second.finish(waiting)
    assert waiting.code == 0, second.logs()
    again = json.loads(waiting.outputs["fencing-tokens"])
    assert all(again[n] > tokens[n] for n in (net, db))
    assert second.run("post").code == 0
    assert [store.status(n)["state"] for n in (net, db)] == ["free", "free"]


def test_bad_inputs_fail_the_step_in_one_line(store: Store, jobs, lock_name):
    for inputs, says in [
        ({"name": ""}, "input name is required"),
        ({"names": "a\nb", "slots": "2"}, "input slots takes one lock"),
        ({"name": lock_name, "mode": "grab"}, "input mode must be lock or check"),
        ({"name": lock_name, "fair": "maybe"}, "input fair must be true or false"),
        ({"name": lock_name, "lease": "soon"}, "could not take"),
    ]:
        step = jobs("bad-" + uuid.uuid4().hex[:4], **inputs).run("main")
        errors = [line for line in step.text.splitlines() if line.startswith("::error::")]
        assert step.code == 1 and len(errors) == 1 and says in errors[0], step.text


#: Stands in for awsflock 0.2.0 on a runner's PATH (`pipx install awsflock` before 0.3 was on
#: PyPI): it knows no --json. Every call but --version is noted in a file beside it.
OLD_AWSFLOCK = """#!/bin/sh
if [ "$1" = --version ]; then echo "awsflock, version 0.2.0"; exit 0; fi
echo "$*" >> "$0.used"
echo "Error: no such option: --json" >&2
exit 2
"""


def old_awsflock_first_on_path(store: Store, folder: Path) -> Path:
    stub = folder / "old-bin" / "awsflock"
    stub.parent.mkdir()
    stub.write_text(OLD_AWSFLOCK)
    stub.chmod(0o755)
    store.env["PATH"] = f"{stub.parent}{os.pathsep}{store.env['PATH']}"
    return stub


def own_version() -> str:
    return ROOT.joinpath("pyproject.toml").read_text().split('version = "', 1)[1].split('"')[0]


@pytest.mark.parametrize("store", ["dev_server"], indirect=True)
@pytest.mark.parametrize("on_path", ["nothing", "awsflock 0.2.0"])
def test_without_its_awsflock_on_path_main_installs_it_from_the_actions_checkout(
    store: Store, jobs, lock_name, tmp_path, on_path
):
    if os.environ.get("CI") != "true" and not os.environ.get("AWSFLOCK_TEST_INSTALL"):
        pytest.skip("installs awsflock from PyPI's packages: CI only (or AWSFLOCK_TEST_INSTALL=1)")
    bare = os.pathsep.join(p for p in store.env["PATH"].split(os.pathsep) if p != str(BIN.parent))
    store.env["PATH"] = bare
    old = old_awsflock_first_on_path(store, tmp_path) if on_path != "nothing" else None
    a = jobs("alpha", name=lock_name)
    taken = a.run("main", timeout=600)
    assert taken.code == 0, a.logs()
    installed = Path(a.env["RUNNER_TOOL_CACHE"]) / "awsflock"
    assert installed.is_dir() and a.paths and a.paths[0].startswith(str(installed))
    assert f"installing {ROOT}" in taken.text
    # A later step finds it on PATH; a second job reuses the install.
    later = a.run("run", "command -v awsflock && awsflock --version")
    assert later.code == 0 and later.text.startswith(str(installed)), later.text
    assert f"awsflock, version {own_version()}" in later.text
    assert a.run("post").code == 0
    again = jobs("beta", name=lock_name).run("main")
    assert again.code == 0 and "installing" not in again.text
    assert old is None or not Path(f"{old}.used").exists()


@pytest.mark.parametrize("store", ["dev_server"], indirect=True)
def test_an_older_awsflock_on_path_is_not_used_and_the_log_says_so(
    store: Store, jobs, lock_name, tmp_path
):
    old = old_awsflock_first_on_path(store, tmp_path)
    a = jobs("alpha", name=lock_name)
    # The action's own install of its checkout, as an earlier job left it in the tool cache
    # (the test above installs it for real).
    key = subprocess.run(
        [
            "node",
            "-p",
            f"require({str(ROOT / 'action/src/awsflock.js')!r}).installKey('', '')"
            " + '/' + process.arch",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    own = Path(a.env["RUNNER_TOOL_CACHE"]) / "awsflock" / key
    (own / "bin").mkdir(parents=True)
    (own / "bin" / "awsflock").symlink_to(BIN)
    (own / ".complete").write_text("test\n")
    taken = a.run("main")
    assert taken.code == 0, a.logs()
    said = f"not using {old}: it is awsflock 0.2.0, and this action needs {own_version()}"
    assert [line for line in taken.text.splitlines() if said in line] == [f"{said}; using its own"]
    assert not Path(f"{old}.used").exists()
    assert store.status(lock_name)["state"] == "held"
    later = a.run("run", "command -v awsflock")
    assert later.text.strip() == str(own / "bin" / "awsflock")
    assert a.run("post").code == 0
    assert store.status(lock_name)["state"] == "free"


#: Stands in for awsflock on PATH: runs the real one, except that an acquire ends the way
#: a cancel that lands just after the grant ends it (the runner's SIGINT reaching main, and
#: awsflock exiting 130 with the lease printed and kept alive, its warning naming the lease).
GRANT_THEN_CANCEL = r"""#!{python}
import json, os, signal, subprocess, sys
real = {real!r}
if sys.argv[1:2] != ["acquire"]:
    os.execv(real, [real, *sys.argv[1:]])
signal.signal(signal.SIGINT, signal.SIG_IGN)  # main passes the cancel on: too late here
got = subprocess.run([real, *sys.argv[1:]], capture_output=True, text=True)
lease = json.loads(got.stdout)
os.kill(os.getppid(), signal.SIGINT)  # the runner cancels main as the grant comes back
sys.stdout.write(got.stdout)
warning = {{"event": "interrupted", "level": "warning", "message":
           "interrupted by signal 2 after the grant: free it with awsflock release x "
           + lease["lease_id"]}}
sys.stderr.write(got.stderr + json.dumps(warning) + "\n")
sys.exit(130)
"""


@pytest.mark.parametrize("store", ["dev_server"], indirect=True)
def test_a_cancel_that_lands_with_the_grant_still_frees_the_lock_and_hides_the_lease(
    store: Store, jobs, lock_name, tmp_path
):
    stub = tmp_path / "bin" / "awsflock"
    stub.parent.mkdir()
    stub.write_text(GRANT_THEN_CANCEL.format(python=sys.executable, real=str(BIN)))
    stub.chmod(0o755)
    store.env["PATH"] = f"{stub.parent}{os.pathsep}{store.env['PATH']}"
    a = jobs("alpha", name=lock_name)
    main = a.run("main")
    assert main.code == 1 and "cancelled just as" in main.text, a.logs()
    assert main.outputs["acquired"] == "false"
    lease_id = a.state["lease-id"]  # saved, though acquire exited 130
    lines = main.text.splitlines()
    masked = lines.index(f"::add-mask::{lease_id}")
    assert all(lease_id not in line for line in lines[:masked])
    assert store.status(lock_name)["state"] == "held"  # kept alive, as awsflock said
    assert a.run("post").code == 0
    assert store.status(lock_name)["state"] == "free"


@pytest.mark.parametrize("store", ["dev_server"], indirect=True)
def test_a_holders_owner_cannot_issue_workflow_commands_in_a_waiters_log(
    store: Store, jobs, lock_name
):
    evil = "nice\n::error::injected by the holder\n::stop-commands::tok"
    a = jobs("alpha", name=lock_name, owner=evil)
    assert a.run("main").code == 0
    waiter = jobs("beta", name=lock_name, wait="2m")
    waited = waiter.start("main")
    wait_for("a progress line", lambda: "place 1 of 1" in waited.text, timeout=20)
    checked = jobs("plan", name=lock_name, mode="check", **{"fail-if-held": "false"}).run("main")
    assert a.run("post").code == 0
    waiter.finish(waited)
    assert waited.code == 0, waited.text
    for text in (waited.text, checked.text):
        commands = [line for line in text.splitlines() if line.startswith("::")]
        assert all(line.startswith("::add-mask::") for line in commands), text
        assert "injected by the holder" in text  # said, as text
    assert waiter.run("post").code == 0


@pytest.mark.parametrize("store", ["dev_server"], indirect=True)
def test_a_lock_name_that_starts_with_a_dash_is_a_name(store: Store, jobs):
    name = "-deploy-" + uuid.uuid4().hex[:6]
    a = jobs("alpha", name=name)
    assert a.run("main").code == 0, a.logs()
    assert jobs("plan", name=name, mode="check").run("main").code == 1
    assert a.run("post").code == 0
    assert store.status(name)["state"] == "free"
