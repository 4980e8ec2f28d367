"""The CLI's export of awsflock's metrics (awsflock.metrics), when the environment asks for it.

- **OTLP**: the standard ``OTEL_*`` variables. Export is on when ``OTEL_METRICS_EXPORTER`` is
  ``otlp`` or an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT``,
  ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``), and off with ``OTEL_METRICS_EXPORTER=none`` or
  ``OTEL_SDK_DISABLED=true``. It goes over OTLP/HTTP (protobuf), every
  ``OTEL_METRIC_EXPORT_INTERVAL`` (default 60 s) while a process lives (``run``, the
  keep-alive renewer) and once at its end. ``OTEL_SERVICE_NAME`` and
  ``OTEL_RESOURCE_ATTRIBUTES`` name the resource (service.name ``awsflock`` by default).
- **Prometheus textfile**: ``AWSFLOCK_METRICS_TEXTFILE=PATH`` adds this process's counts to
  the file, in Prometheus's text format, for node_exporter's textfile collector
  (``awsflock.cli.textfile``).

The last export at a process's end is given at most ``FLUSH_S``, and the textfile's write at
most ``textfile.BOUND_S``: a collector that does not answer, a lock file held by another
process or a hung mount never holds a command up longer than that. Both need the ``otel`` extra (the
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
            from awsflock.cli import textfile as prometheus

            _warn([prometheus.write(Path(textfile), memory.get_metrics_data())])
        # The collector may not answer: the process ends without waiting longer than FLUSH_S.
        closing = threading.Thread(target=provider.shutdown, daemon=True)
        closing.start()
        closing.join(FLUSH_S)

    atexit.register(finish)


def _warn(lines: list[str]) -> None:
    for line in filter(None, lines):
        log.warning("%s", line, extra={"event": "metrics_export"})
