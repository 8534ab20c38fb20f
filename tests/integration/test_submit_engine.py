"""The spark-submit engine (clusters without a Connect server) keeps a long-running pipeline's disk bounded:
one log per pipeline, each run under its header, rolled over by size, without the Kafka clients' INFO
chatter; and no run leaves its files (code archive, log4j2 file, result) behind."""

from __future__ import annotations

import pytest

from tests.scenario import Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_spark_submit_runs_share_one_pipeline_log_and_leave_no_files(settings, unique, tmp_path,
                                                                       monkeypatch, kafka_reader) -> None:
    logs, temp = tmp_path / "logs", tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("EOSBATCH_SPARK_REMOTE", "")  # the spark-submit engine
    monkeypatch.setenv("EOSBATCH_KAFKA_READER", kafka_reader)  # the Python reader on a classic session too
    monkeypatch.setenv("EOSBATCH_LOG_DIR", str(logs))
    monkeypatch.setenv("TMPDIR", str(temp))
    scenario = Scenario(settings, unique, "totals", records=2400, batch=1000)  # 3 batches, one run
    done = scenario.run()
    assert done.returncode == 0, done.stderr[-3000:]
    scenario.assert_exactly_once()
    batches = [batch_id for batch_id, _, state in scenario.batches() if state == "published"]
    assert len(batches) == 3
    for batch_id in batches:  # the driver hands its counts back: the runner logs them as with Connect
        assert f"batch {batch_id}: read " in done.stdout and " dead letters" in done.stdout, done.stdout[-3000:]

    log = logs / f"{scenario.pipeline}.log"
    assert sorted(p.name for p in logs.glob(f"{scenario.pipeline}*")) == [log.name]
    text = log.read_text(errors="replace")
    headers = [line for line in text.splitlines() if line.startswith("==== eosbatch ")]
    assert [h.rsplit(" ", 1)[-1] for h in headers] == [str(b) for b in batches], headers
    assert "Stage 0" in text or "Job 0" in text or "SparkContext" in text, text[-2000:]  # the driver's own log
    kafka_info = [line for line in text.splitlines() if " INFO " in line and
                  ("ConsumerConfig" in line or "AppInfoParser" in line or "KafkaConsumer" in line)]
    assert kafka_info == [], kafka_info[:3]
    left = [p.name for p in temp.iterdir() if p.name.startswith("eosbatch-submit-")]
    assert left == [], f"spark-submit runs left their files behind: {left}"
