"""The CLI's export of awsflock's metrics (awsflock.metrics), when the environment asks for it.

- **OTLP**: the standard ``OTEL_*`` variables. Export is on when ``OTEL_METRICS_EXPORTER`` is
  ``otlp`` or an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT``,
  ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``), and off with ``OTEL_METRICS_EXPORTER=none`` or
  ``OTEL_SDK_DISABLED=true``. It goes over OTLP/HTTP (protobuf), every
  ``OTEL_METRIC_EXPORT_INTERVAL`` (default 60 s) while a process lives (``run``, the
  keep-alive renewer) and once at its end. ``OTEL_SERVICE_NAME`` and
  ``OTEL_RESOURCE_ATTRIBUTES`` name the resource (service.name ``awsflock`` by default).
- **Prometheus textfile**: ``AWSFLOCK_METRICS_TEXTFILE=PATH`` adds this process's counts to
  the file, in Prometheus's text format, for node_exporter's textfile collector. The file is
  rewritten atomically (a temporary file renamed over it) under a lock file beside it, so
  commands on one host add up.

The last export at a process's end is given at most ``FLUSH_S``: a collector that does not
answer never holds a command up longer than that. Both need the ``otel`` extra (the
OpenTelemetry SDK and OTLP exporter); nothing of it is imported unless one is asked for.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from awsflock import extras, metrics

log = logging.getLogger("awsflock.metrics")

TEXTFILE_ENV = "AWSFLOCK_METRICS_TEXTFILE"
#: The longest a process's end waits for its last export.
FLUSH_S = 1.0


def wanted(env: Any = os.environ) -> tuple[bool, str]:
    """(OTLP export asked for, the textfile path or "")."""
    textfile = env.get(TEXTFILE_ENV, "").strip()
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False, textfile
    exporters = _exporters(env)
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
    )
    otlp = "otlp" in exporters or (not exporters and bool(endpoint))
    return otlp, textfile


def _exporters(env: Any) -> list[str]:
    """OTEL_METRICS_EXPORTER's list (comma-separated, as the specification has it)."""
    said = env.get("OTEL_METRICS_EXPORTER", "")
    return [e.strip().lower() for e in said.split(",") if e.strip()]


def problems(env: Any = os.environ) -> list[str]:
    """What the environment asks for that cannot be done as asked (said as warnings)."""
    found = []
    others = [e for e in _exporters(env) if e not in ("otlp", "none")]
    if others:
        found.append(
            f"OTEL_METRICS_EXPORTER={env['OTEL_METRICS_EXPORTER']}: awsflock exports its "
            f"metrics over otlp only, not {', '.join(others)}"
        )
    if metrics.lock_setting_error():
        found.append(metrics.lock_setting_error())
    return found


class _Forward(logging.Handler):
    """OpenTelemetry's own log records (a failed export, a retry) said as awsflock's warnings,
    so they follow -q and --log-format like every other line."""

    def emit(self, record: logging.LogRecord) -> None:
        # At most a warning: the command did its work; only its metrics went astray.
        log.log(
            min(record.levelno, logging.WARNING),
            "metrics export: %s",
            record.getMessage().splitlines()[0] if record.getMessage() else "",
            extra={"event": "metrics_export"},
        )


def start() -> None:
    """Set up what the environment asks for. At the process's end (``atexit``) the textfile
    is written and the last export made, within ``FLUSH_S``; what could not be done is said
    then (once the command's -q and --log-format are known)."""
    import atexit

    otlp, textfile = wanted()
    if not otlp and not textfile:
        return
    said = problems()
    otel = logging.getLogger("opentelemetry")
    otel.addHandler(_Forward())
    otel.propagate = False
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import (
            InMemoryMetricReader,
            PeriodicExportingMetricReader,
        )
        from opentelemetry.sdk.resources import Resource

        readers: list[Any] = []
        if otlp:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        memory = InMemoryMetricReader() if textfile else None
        if memory is not None:
            readers.append(memory)
    except ImportError as exc:
        said.append(
            f"metrics were asked for ({'OTEL_*' if otlp else TEXTFILE_ENV}) but cannot be "
            f"exported: {exc.name or exc} is not installed: {extras.install_command('otel')}"
        )
        atexit.register(lambda: _warn(said))
        return
    # service.name: OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES if they say, else ours.
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    resource = Resource.create({} if named else {"service.name": "awsflock"})
    # Shut down here, within FLUSH_S, not again by the SDK's own exit handler.
    provider = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)
    metrics.use(provider)

    def finish() -> None:
        _warn(said)
        if memory is not None:
            try:
                write_textfile(Path(textfile), memory.get_metrics_data())
            except OSError as exc:
                _warn([f"could not write the metrics to {textfile}: {exc.strerror or exc}"])
        # The collector may not answer: the process ends without waiting longer than FLUSH_S.
        closing = threading.Thread(target=provider.shutdown, daemon=True)
        closing.start()
        closing.join(FLUSH_S)

    atexit.register(finish)


def _warn(lines: list[str]) -> None:
    for line in lines:
        log.warning("%s", line, extra={"event": "metrics_export"})


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


def samples(data: Any) -> tuple[dict[str, float], dict[str, tuple[str, str]]]:
    """This process's samples (``name{labels}`` -> value) and each family's (type, help)."""
    values: dict[str, float] = {}
    families: dict[str, tuple[str, str]] = {}
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


def _read(path: Path) -> tuple[dict[str, float], dict[str, tuple[str, str]]]:
    values: dict[str, float] = {}
    families: dict[str, tuple[str, str]] = {}
    helps: dict[str, str] = {}
    try:
        text = path.read_text()
    except FileNotFoundError:
        return values, families
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, said = line[7:].partition(" ")
            helps[name] = said
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            families[name] = (kind, helps.get(name, ""))
        elif line and not line.startswith("#"):
            key, _, number = line.rpartition(" ")
            try:
                values[key] = float(number)
            except ValueError:
                continue
    return values, families


def write_textfile(path: Path, data: Any) -> None:
    """Add this process's samples to the Prometheus textfile ``path`` (every awsflock metric
    is a counter or a histogram: their samples add up), atomically, under ``path.lock``."""
    import fcntl
    import tempfile

    mine, families = samples(data)
    if path.is_dir():
        raise IsADirectoryError(21, "Is a directory", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        values, known = _read(path)
        for key, value in mine.items():
            values[key] = values.get(key, 0.0) + value
        known.update(families)
        lines: list[str] = []
        for family in sorted(known):
            kind, description = known[family]
            lines += [f"# HELP {family} {description}", f"# TYPE {family} {kind}"]
            for key in sorted((k for k in values if _family_of(k, known) == family), key=_order):
                lines.append(f"{key} {_number(values[key])}")
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
        with os.fdopen(fd, "w") as out:
            out.write("\n".join(lines) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)


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
