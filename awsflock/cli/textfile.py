"""The Prometheus textfile (``AWSFLOCK_METRICS_TEXTFILE``): this process's samples added to the
file's, in Prometheus's text format, for node_exporter's textfile collector.

The file is rewritten atomically (a temporary file renamed over it) under a lock file beside it
(``PATH.lock``), so the commands of one host add up. Writing never holds a command past
``BOUND_S``, whatever the filesystem does:

- The lock is waited for at most ``LOCK_WAIT_S`` (another writer paused, or stuck on a hung
  mount). Past it, the samples are kept in a *pending* file beside it (``PATH.pending.ID``,
  written without the lock, under a temporary name renamed into place, so never seen half
  written), and the next writer that gets the lock adds them in and deletes the file.
- The textfile records, in a comment (``# awsflock folded NAME``), the pending files it has
  added: a writer that ended between writing the textfile and deleting them leaves them behind,
  and the next writer deletes those without counting them twice.
- The whole write runs in a daemon thread joined for ``BOUND_S``: an ``open`` that blocks on a
  hung mount holds up only that thread, which ends with the process.

None of these names end in ``.prom``: the textfile collector reads only ``*.prom`` files.
"""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
import threading
import uuid
from pathlib import Path
from typing import IO, Any

from awsflock import metrics
from awsflock.clock import Clock, SystemClock
from awsflock.text import format_seconds

#: The longest a write waits for the lock file; then its samples are kept for the next write.
LOCK_WAIT_S = 0.5
#: The longest a write may take in all (the filesystem's calls included).
BOUND_S = 1.0
#: How often the lock is tried again while another process holds it.
POLL_S = 0.02
#: Between the textfile's name and a pending file's id.
PENDING = ".pending."
#: The comment that names a pending file the textfile has added.
FOLDED = "# awsflock folded "

Values = dict[str, float]
Families = dict[str, tuple[str, str]]


def write(
    path: Path,
    data: Any,
    *,
    clock: Clock | None = None,
    lock_wait_s: float = LOCK_WAIT_S,
    bound_s: float = BOUND_S,
) -> str:
    """Add this process's samples (``data``: OpenTelemetry's metrics data) to the textfile
    ``path``, within ``bound_s``. Returns "" once written, else the one warning to say."""
    mine, families = samples(data)
    said: list[str] = []

    def work() -> None:
        try:
            said.append(_write(path, mine, families, clock or SystemClock(), lock_wait_s))
        except OSError as exc:
            said.append(f"could not write the metrics to {path}: {exc.strerror or exc}")

    thread = threading.Thread(target=work, name="awsflock-metrics-textfile", daemon=True)
    thread.start()
    thread.join(bound_s)
    if said:
        return said[0]
    return (
        f"could not write the metrics to {path} within {format_seconds(bound_s)} (its "
        "filesystem does not answer): this command's counts are left out"
    )


def _write(path: Path, mine: Values, families: Families, clock: Clock, wait_s: float) -> str:
    if path.is_dir():
        raise IsADirectoryError(21, "Is a directory", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    with _open_lock(path) as lock:
        if not _take(lock, clock, wait_s):
            kept = _keep(path, mine, families)
            return (
                f"metrics not written to {path}: its lock file {path}.lock was held by another "
                f"process for {format_seconds(wait_s)}; this command's counts are kept in "
                f"{kept.name}, which the next write adds"
            )
        _fold(path, mine, families)
    return ""


def _open_lock(path: Path) -> IO[str]:
    return open(str(path) + ".lock", "a")


def _take(lock: IO[str], clock: Clock, wait_s: float) -> bool:
    """Take the lock file's exclusive lock, trying for ``wait_s``: whether it was taken."""
    import fcntl

    deadline = clock.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            left = deadline - clock.monotonic()
            if left <= 0:
                return False
            clock.sleep(min(POLL_S, left))


def _keep(path: Path, mine: Values, families: Families) -> Path:
    """This process's samples in a new pending file beside ``path``, without the lock."""
    pending = path.with_name(f"{path.name}{PENDING}{os.getpid()}-{uuid.uuid4().hex}")
    _put(pending, _render(mine, families, []))
    return pending


def _fold(path: Path, mine: Values, families: Families) -> None:
    """Under the lock: the textfile's samples, the pending files' and this process's, added
    up and written; then the pending files added are deleted."""
    values, known, folded = _read(path)
    added: list[Path] = []
    for pending in sorted(path.parent.glob(glob.escape(path.name) + PENDING + "*")):
        if pending.name in folded:
            # Added already by a writer that ended before deleting it.
            _unlink(pending)
            continue
        theirs, their_families, _ = _read(pending)
        _add(values, theirs)
        known.update(their_families)
        added.append(pending)
    _add(values, mine)
    known.update(families)
    _put(path, _render(values, known, [p.name for p in added]))
    for pending in added:
        _unlink(pending)


def _add(values: Values, more: Values) -> None:
    for key, value in more.items():
        values[key] = values.get(key, 0.0) + value


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _put(path: Path, text: str) -> None:
    """``text`` as the file ``path``, atomically (a temporary file renamed over it)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name.split(PENDING)[0] + ".")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        _unlink(Path(tmp))
        raise


# -- Prometheus's text format -------------------------------------------------------------------


def _prometheus_name(name: str, unit: str, counter: bool) -> str:
    base = name.replace(".", "_")
    if unit == "s":
        base += "_seconds"
    return base + ("_total" if counter else "")


def _labels(attributes: dict[str, Any], extra: tuple[tuple[str, str], ...] = ()) -> str:
    pairs = sorted((str(k), str(v)) for k, v in attributes.items()) + list(extra)
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escaped(v)}"' for k, v in pairs) + "}"


def _escaped(value: str) -> str:
    """A label value as the text format writes it: backslash, quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def samples(data: Any) -> tuple[Values, Families]:
    """This process's samples (``name{labels}`` -> value) and each family's (type, help)."""
    values: Values = {}
    families: Families = {}
    for resource in data.resource_metrics if data is not None else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                kind, unit, description = metrics.INSTRUMENTS.get(
                    metric.name, ("counter", "", metric.description)
                )
                counter = kind == "counter"
                family = _prometheus_name(metric.name, unit, counter)
                families[family] = ("counter" if counter else "histogram", description)
                for p in metric.data.data_points:
                    attrs = dict(p.attributes)
                    if counter:
                        values[family + _labels(attrs)] = float(p.value)
                        continue
                    base = family
                    running = 0
                    for bound, count in zip([*p.explicit_bounds, "+Inf"], p.bucket_counts):
                        running += count
                        le = bound if isinstance(bound, str) else repr(float(bound))
                        values[base + "_bucket" + _labels(attrs, (("le", le),))] = float(running)
                    values[base + "_sum" + _labels(attrs)] = float(p.sum)
                    values[base + "_count" + _labels(attrs)] = float(p.count)
    return values, families


def _read(path: Path) -> tuple[Values, Families, set[str]]:
    """A file's samples, families and the pending files it names as added."""
    values: Values = {}
    families: Families = {}
    folded: set[str] = set()
    helps: dict[str, str] = {}
    try:
        text = path.read_text()
    except FileNotFoundError:
        return values, families, folded
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, said = line[7:].partition(" ")
            helps[name] = said
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            families[name] = (kind, helps.get(name, ""))
        elif line.startswith(FOLDED):
            folded.add(line[len(FOLDED) :].strip())
        elif line and not line.startswith("#"):
            key, _, number = line.rpartition(" ")
            try:
                values[key] = float(number)
            except ValueError:
                continue
    return values, families, folded


def _render(values: Values, known: Families, folded: list[str]) -> str:
    lines = [FOLDED + name for name in folded]
    for family in sorted(known):
        kind, description = known[family]
        lines += [f"# HELP {family} {description}", f"# TYPE {family} {kind}"]
        for key in sorted((k for k in values if _family_of(k, known) == family), key=_order):
            lines.append(f"{key} {_number(values[key])}")
    return "\n".join(lines) + "\n"


def _family_of(key: str, families: dict[str, Any]) -> str:
    name = key.split("{", 1)[0]
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name[: -len(suffix)] in families:
            return name[: -len(suffix)]
    return name


def _order(key: str) -> tuple[str, float]:
    """Samples in order, a histogram's buckets by their bound (+Inf last)."""
    if ',le="' not in key and '{le="' not in key:
        return key, 0.0
    head, _, bound = key.rpartition('le="')
    value = bound.split('"', 1)[0]
    return head, float("inf") if value == "+Inf" else float(value)


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)
