"""No lane blocked for ever in silence: a committed batch whose publish cannot succeed for a reason that
appeared after its commit (here its output topic was deleted) fails with a terminal error naming the batch
and the cause, `status` shows it on the batch, and once the operator recreates the topic the next run
publishes it exactly once."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AdminClient

from eosbatch import faults
from examples.orders import generate
from tests.scenario import Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


def test_output_topic_deleted_after_commit_is_a_terminal_error_shown_by_status(settings, unique):
    scenario = Scenario(settings, unique, "totals", records=1200, batch=2000)
    crashed = scenario.run("commit.after_commit")
    assert crashed.returncode == faults.EXIT_CODE and scenario.states() == ["committed"]
    admin = AdminClient(settings.kafka())  # held until the answer: a dropped client never resolves its futures
    admin.delete_topics([scenario.output])[scenario.output].result(30)

    stuck = scenario.run()
    assert stuck.returncode == 2, stuck.stderr[-2000:]
    assert "Traceback" not in stuck.stderr
    [line] = [x for x in stuck.stderr.splitlines() if x.startswith("eosbatch")]
    assert scenario.output in line
    status = json.loads(scenario.cli("status", scenario.pipeline, "--json").stdout)
    [batch] = status["batches"]
    assert batch["state"] == "committed" and scenario.output in (batch["error"] or ""), batch

    generate.ensure_topics(settings, {scenario.output: 3})  # the operator's way out
    assert scenario.run().returncode == 0
    scenario.assert_exactly_once()
