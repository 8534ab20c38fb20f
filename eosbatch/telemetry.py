"""Where the metrics (eosbatch.metrics) go: the OpenTelemetry meter an edge (a CLI command, an Airflow task) hands
to the steps through the Context, chosen by EOSBATCH_METRICS (config.metrics_target):

- global (the default): the process's global MeterProvider. In an Airflow task with `[metrics] otel_on`, that is
  Airflow's own, so eosbatch's metrics go where Airflow's go; with none configured, the API's no-op.
- otlp: a MeterProvider of eosbatch's own, exporting by OTLP. The standard variables configure it:
  OTEL_EXPORTER_OTLP_(METRICS_)ENDPOINT, _HEADERS, _PROTOCOL (http/protobuf, the default, or grpc),
  OTEL_METRIC_EXPORT_INTERVAL (ms), OTEL_SERVICE_NAME (default eosbatch), OTEL_RESOURCE_ATTRIBUTES.
- file:PATH: the same, exporting each collection as one JSON line appended to PATH (the SDK's console exporter).
- none: nothing is measured.

One provider per process (and per fork: a forked Airflow task builds its own). A process that ends by
os._exit (an Airflow task) calls `flush` first; any other flushes at exit by itself.
"""

from __future__ import annotations

import os
from typing import IO, Any

from opentelemetry import metrics as otel

from eosbatch.config import METRICS, Settings
from eosbatch.exceptions import ConfigError
from eosbatch.metrics import METER, NO_METRICS, Metrics

# (pid, target) -> (eosbatch's own SDK MeterProvider, None for the global one; the instruments of its meter)
_PROVIDERS: dict[tuple[int, str], tuple[Any, Metrics]] = {}


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("eosbatch")
    except metadata.PackageNotFoundError:
        return "unknown"


def metrics(settings: Settings) -> Metrics:
    """The instruments the settings' EOSBATCH_METRICS names, made once per process."""
    target = settings.metrics
    if target == "none":
        return NO_METRICS
    key = (os.getpid(), target)
    if key not in _PROVIDERS:
        # global: the API's proxy meter, which follows a provider set later (Airflow sets its own at task start)
        provider = None if target == "global" else _provider(target)
        meter = otel.get_meter(METER, _version()) if provider is None else provider.get_meter(METER, _version())
        _PROVIDERS[key] = (provider, Metrics(meter))
    return _PROVIDERS[key][1]


def flush(timeout_ms: int = 10_000) -> None:
    """Export what was measured now: before a process ends without running its exit handlers."""
    for (pid, _), (provider, _) in list(_PROVIDERS.items()):
        if pid == os.getpid() and provider is not None:
            provider.force_flush(timeout_ms)
    found = otel.get_meter_provider()
    if hasattr(found, "force_flush"):  # the global SDK provider (Airflow's), when one is set
        found.force_flush(timeout_ms)


def _provider(target: str) -> Any:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    exporter = _file_exporter(target[len("file:"):]) if target.startswith("file:") else _otlp_exporter()
    own = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: "eosbatch"}
    return MeterProvider(metric_readers=[PeriodicExportingMetricReader(exporter)], resource=Resource.create(own))


def _file_exporter(path: str) -> Any:
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, MetricsData

    try:
        out: IO[str] = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - the exporter's for good
    except OSError as exc:
        raise ConfigError(METRICS, f"cannot append to {path}: {exc.strerror}") from None

    def one_line(data: MetricsData) -> str:
        return data.to_json(indent=None) + "\n"

    return ConsoleMetricExporter(out=out, formatter=one_line)


def _otlp_exporter() -> Any:
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip()
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        elif protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter  # type: ignore[assignment]
        else:
            raise ConfigError(METRICS, f"otlp: OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r} is not supported "
                                       "(http/protobuf or grpc)")
    except ImportError as exc:
        raise ConfigError(METRICS, f"otlp: the OTLP exporter for {protocol} is not installed ({exc.name}); "
                                   "pip install opentelemetry-exporter-otlp") from None
    return OTLPMetricExporter()
