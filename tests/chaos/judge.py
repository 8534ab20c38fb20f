"""The end of every chaos test, judged twice (issue 37, item 5): `eosbatch verify` (the code under test's own
audit) and the independent history checker (tests/history, which imports nothing of eosbatch) must reach the
same verdict on the history the test left; the time the checker took is kept for the suite's report."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from tests.history.checker import aborted_attempts, check
from tests.history.collect import SinkSpec, Where, collect
from tests.history.history import Anomaly

ROOT = Path(__file__).resolve().parents[2]
SECONDS: list[float] = []  # the checker's time (collect + check) at each judged end, this session


class Verdicts(NamedTuple):
    verify_ok: bool
    verify_out: str
    anomalies: list[Anomaly]
    seconds: float

    @property
    def agree(self) -> bool:
        return self.verify_ok == (not self.anomalies)

    def describe(self) -> str:
        lines = [f"eosbatch verify: {'ok' if self.verify_ok else 'FAIL'}; history checker: "
                 f"{len(self.anomalies)} anomalies ({self.seconds:.2f} s)", *(a.line() for a in self.anomalies)]
        return "\n".join(lines) + "\n" + self.verify_out[-3000:]


def judge(settings: Any, pipeline: str, output: str | None, sink: SinkSpec | None, env: dict[str, str],
          decode: Callable[[bytes], dict[str, Any]] | None = None, recompute: bool = False) -> Verdicts:
    """`eosbatch verify` in a process of its own, and the checker on the history read from the stack."""
    done = subprocess.run([sys.executable, "-m", "eosbatch.cli", "verify", pipeline,
                           *([] if recompute else ["--no-recompute"])], env=env, capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    started = time.monotonic()
    history = collect(pipeline, output, sink, Where(settings.kafka_bootstrap, settings.database_url,
                                                    dict(settings.kafka_config)))
    anomalies = check(history, decode)
    seconds = time.monotonic() - started
    SECONDS.append(seconds)
    print(f"history checker: {pipeline}: {len(anomalies)} anomalies, {len(aborted_attempts(history))} aborted "
          f"attempts in the log, {seconds:.2f} s")  # shown with -s
    return Verdicts(done.returncode == 0, f"{done.stdout}\n{done.stderr}", anomalies, seconds)


def assert_exactly_once_judged(*args: Any, **kwargs: Any) -> Verdicts:
    """judge(...): both say exactly-once (which is also both agreeing)."""
    verdicts = judge(*args, **kwargs)
    assert verdicts.agree, f"eosbatch verify and the history checker disagree:\n{verdicts.describe()}"
    assert verdicts.verify_ok and not verdicts.anomalies, verdicts.describe()
    return verdicts


def avro_decoder(schema: dict[str, Any], schema_id: int) -> Callable[[bytes], dict[str, Any]]:
    """An Avro output value in the Confluent wire format, decoded with fastavro."""
    import fastavro

    parsed = fastavro.parse_schema(schema)

    def decode(data: bytes) -> dict[str, Any]:
        assert data[:5] == b"\x00" + schema_id.to_bytes(4, "big")
        row = fastavro.schemaless_reader(io.BytesIO(data[5:]), parsed)
        assert isinstance(row, dict)
        return row

    return decode
