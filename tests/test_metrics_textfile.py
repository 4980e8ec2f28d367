"""The Prometheus textfile's writer (awsflock.cli.textfile): a lock file held by another process
or a filesystem that does not answer holds no command past its bound, and loses no counts that
a later write can still add, nor counts any twice."""

from __future__ import annotations

import fcntl
import threading
from pathlib import Path
from typing import Any

import pytest

from awsflock import metrics
from awsflock.cli import textfile
from awsflock.clock import FakeClock
from awsflock.lock.lease import LockTable
from awsflock.records import Identity
from awsflock.stores.memory import MemoryStore

sdk = pytest.importorskip("opentelemetry.sdk.metrics")
export = pytest.importorskip("opentelemetry.sdk.metrics.export")
parser = pytest.importorskip("prometheus_client.parser")


def one_command(clock: FakeClock) -> Any:
    """The metrics data of one command that took and released a lock."""
    reader = export.InMemoryMetricReader()
    metrics.use(sdk.MeterProvider(metric_readers=[reader]))
    try:
        table = LockTable(store=MemoryStore(clock=clock), clock=clock, identity=Identity("a"))
        table.release(table.acquire("deploy", wait=0))
        return reader.get_metrics_data()
    finally:
        metrics.use(None)


def granted(path: Path) -> float:
    families = {f.name: f for f in parser.text_string_to_metric_families(path.read_text())}
    (sample,) = families["awsflock_acquisitions"].samples
    assert sample.labels["outcome"] == "granted"
    return float(sample.value)


def beside(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "awsflock.prom"


def test_a_held_lock_file_skips_the_write_briefly_and_the_next_write_adds_its_counts(
    path: Path, clock: FakeClock
):
    # Another process's lock: flock locks belong to an open file description, so a second
    # open of the lock file in this process stands in for it.
    with open(str(path) + ".lock", "a") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        started = clock.monotonic()
        said = textfile.write(path, one_command(clock), clock=clock, bound_s=60)
        assert clock.monotonic() - started == pytest.approx(textfile.LOCK_WAIT_S)
        assert said.startswith(f"metrics not written to {path}: its lock file")
        assert "held by another process" in said and "the next write adds" in said
        assert not path.exists()
        (pending,) = [n for n in beside(path) if ".pending." in n]
        assert not pending.endswith(".prom")  # node_exporter reads only *.prom
    assert textfile.write(path, one_command(clock), clock=clock) == ""
    assert granted(path) == 2.0
    assert beside(path) == ["awsflock.prom", "awsflock.prom.lock"]
    assert textfile.write(path, one_command(clock), clock=clock) == ""
    assert granted(path) == 3.0


def test_pending_counts_left_behind_by_a_writer_that_ended_are_not_counted_twice(
    path: Path, clock: FakeClock, monkeypatch
):
    with open(str(path) + ".lock", "a") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        textfile.write(path, one_command(clock), clock=clock, bound_s=60)
    # The next writer ends (killed) after writing the textfile, before deleting the pending file.
    monkeypatch.setattr(textfile, "_unlink", lambda p: None)
    assert textfile.write(path, one_command(clock), clock=clock, bound_s=60) == ""
    assert granted(path) == 2.0
    assert any(".pending." in n for n in beside(path))
    monkeypatch.undo()
    assert textfile.write(path, one_command(clock), clock=clock, bound_s=60) == ""
    assert granted(path) == 3.0
    assert beside(path) == ["awsflock.prom", "awsflock.prom.lock"]


def test_a_filesystem_that_does_not_answer_holds_the_write_only_for_its_bound(
    path: Path, clock: FakeClock, monkeypatch
):
    hung = threading.Event()

    def open_on_a_hung_mount(p: Path) -> Any:
        hung.wait(60)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(textfile, "_open_lock", open_on_a_hung_mount)
    try:
        said = textfile.write(path, one_command(clock), clock=clock, bound_s=0.01)
    finally:
        hung.set()
    assert said.startswith(f"could not write the metrics to {path} within ")
    assert said.endswith("(its filesystem does not answer): this command's counts are left out")


def test_a_textfile_that_cannot_be_written_is_one_warning(tmp_path: Path, clock: FakeClock):
    said = textfile.write(tmp_path, one_command(clock), clock=clock)
    assert said == f"could not write the metrics to {tmp_path}: Is a directory"
