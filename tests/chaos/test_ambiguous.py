"""An ambiguous transaction outcome (issue 37, item 3): commit_transaction in flight while the transaction
coordinator is paused, so that the call times out and nobody knows whether the EndTxn took effect.

On the single-broker stack the broker is every partition's leader and the coordinator of every transactional
id, so SIGSTOP on it pauses the coordinator. The runner must neither retry the commit nor abort on the same
producer: it abandons it, a new producer's init_transactions settles the transaction (the coordinator completes
or aborts it, and bumps the epoch), and only then does the marker decide: finalize, or publish again.
"""

from __future__ import annotations

import json
import os
import re
import signal

import pytest

from eosbatch import config
from tests.chaos.control import end_exactly_once, state, wait_until
from tests.scenario import Scenario

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

RECORDS = 1200
BATCH = 1500  # one batch
CALL_TIMEOUT_S = 5  # commit_transaction gives up after this; the new producer's init_transactions has as long
SETTLING = "ambiguous transaction outcome"  # the publish step's line when it abandons the producer
EARLY_DROPPED = "early publish dropped (its Kafka commit failed"  # early publish: the same, then publish()
FINALIZED = r"its marker shows it published already; finalizing only"
REPUBLISHED = r"published \d+ records\n"  # not "(produced while it committed)": produced again, from the outbox

# where the runner stops; the call that then times out on the paused coordinator; the line saying the producer
# was abandoned; what the new producer's marker read may decide
CASES = [
    # EndTxn sent: whether the coordinator took it is what nobody knows (the request waits in its socket)
    ("publish.before_end_txn", "commit_transaction", SETTLING, (FINALIZED, REPUBLISHED)),
    # AddOffsetsToTxn/TxnOffsetCommit: no EndTxn was ever sent, so the new producer's init_transactions aborts
    # the transaction, the marker is absent and the batch is published again under the new epoch. The call
    # waits for its request to time out (socket.timeout.ms, lowered below with the call timeout).
    ("publish.mid_produce", "send_offsets_to_transaction (the marker)", SETTLING, (REPUBLISHED,)),
    # early publish: the transaction was filled while PostgreSQL committed; its EndTxn times out the same way
    ("publish.before_end_txn", "commit_transaction", EARLY_DROPPED, (FINALIZED, REPUBLISHED)),
]


@pytest.mark.parametrize(("point", "call", "settling", "decisions"), CASES,
                         ids=["end_txn", "txn_offset_commit", "early-end_txn"])
def test_a_transactional_call_times_out_on_a_paused_coordinator(settings, unique, services, runners, point, call,
                                                                 settling, decisions):
    """The runner stops at `point`; the broker is SIGSTOPped; the runner resumes and `call` times out. The runner
    logs the ambiguous outcome, the broker is SIGCONTed, and the runner settles the batch with a new producer
    (init_transactions, then the marker: finalize or publish again): it ends exactly-once, in this run or, if
    the new init_transactions met the broker still waking up, in the next one."""
    early = settling == EARLY_DROPPED
    scenario = Scenario(settings, unique, "latest" if early else "totals", records=RECORDS, batch=BATCH)
    # the run's log is on stdout, a file here: unbuffered, so that the test sees the line when it is written
    short = {config.TRANSACTION_CALL_TIMEOUT: str(CALL_TIMEOUT_S), "PYTHONUNBUFFERED": "1",
             config.KAFKA_CONFIG: json.dumps({"socket.timeout.ms": CALL_TIMEOUT_S * 1000}),
             config.EARLY_PUBLISH: "1" if early else "0"}
    runner = runners.start(scenario, fault=f"{point}:stop", env=short)
    frozen = runner.stopped_at(point)
    broker = services.kafka.pid()
    assert broker is not None
    os.kill(broker, signal.SIGSTOP)
    try:
        wait_until(lambda: state(broker) == "T", 30, f"the broker {broker} to stop")
        runner.resume(frozen)
        wait_until(lambda: settling in runner.stdout or runner.process.poll() is not None, 3 * CALL_TIMEOUT_S + 30,
                   f"the runner's {call} to time out on the paused coordinator")
    finally:
        os.kill(broker, signal.SIGCONT)
    code = runner.wait()
    log = runner.stdout
    told = f"{log[-3000:]}\n{runner.tail()}"
    assert runner.fired_points() == [point]
    assert settling in log, told
    after = log[log.index(settling):]
    assert f"{call}: outcome unknown" in after.splitlines()[0], told
    if code == 0:  # settled in this run: after the line, the new producer's marker read decided
        assert [d for d in decisions if re.search(d, after)], told
    else:  # the new init_transactions met the broker still waking up: a transient error, the next run settles it
        assert code == 3, told
        done = scenario.run()
        assert done.returncode == 0, done.stderr[-3000:]
    end_exactly_once(scenario)
