"""`eosbatch compact`: the ledger's per-batch detail of old published batches (one committed range and one
batch range per partition and batch) is merged into one committed range per touching run, and the pipeline
stays exactly-once, verifiable, replay-safe and able to go on."""

from __future__ import annotations

import pytest

from eosbatch import commands
from eosbatch.ledger import store
from tests.scenario import Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _rows(settings, pipeline: str) -> tuple[int, int]:
    with store.transaction(settings) as cur:
        cur.execute("SELECT count(*) FROM eosbatch.committed_ranges WHERE pipeline = %s", (pipeline,))
        committed = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM eosbatch.batch_ranges r JOIN eosbatch.batches b ON b.id = r.batch_id "
                    "WHERE b.pipeline = %s", (pipeline,))
        return committed, cur.fetchone()[0]


def test_compact_merges_old_detail_and_the_pipeline_stays_exactly_once(settings, unique, monkeypatch) -> None:
    scenario = Scenario(settings, unique, "totals", batch=500)  # 2,400 records in 3 partitions: several batches
    assert scenario.run().returncode == 0
    published = scenario.batches()
    assert len(published) >= 4 and {s for _, _, s in published} == {"published"}
    before = _rows(settings, scenario.pipeline)
    assert before[0] > 3

    kept = scenario.cli("compact", scenario.pipeline)  # the default keeps a week: nothing is that old
    assert kept.returncode == 0 and _rows(settings, scenario.pipeline) == before, kept.stderr[-2000:]
    scenario.env_overrides["EOSBATCH_COMPACT_AFTER_DAYS"] = "0"  # the setting is the command's default too
    done = scenario.cli("compact", scenario.pipeline)
    del scenario.env_overrides["EOSBATCH_COMPACT_AFTER_DAYS"]
    assert done.returncode == 0, done.stderr[-2000:]
    print(done.stdout.strip())
    assert _rows(settings, scenario.pipeline) == (3, 0)  # one run of offsets per partition, no batch detail
    scenario.assert_exactly_once()

    for name, value in scenario.env().items():
        monkeypatch.setenv(name, value)
    first = published[0][0]
    audit = commands.verify(scenario.pipeline, batch_id=first, log=lambda _: None)
    assert audit.ok and "compacted" in audit.findings[0].detail, [f.line() for f in audit.findings]
    assert commands.replay(scenario.pipeline, first, log=lambda _: None).action == "nothing"

    scenario.produce(700)  # the pipeline goes on, and compacts again
    assert scenario.run().returncode == 0
    assert scenario.cli("compact", scenario.pipeline, "--older-than-days", "0").returncode == 0
    assert _rows(settings, scenario.pipeline) == (3, 0)
    scenario.assert_exactly_once()
    # The sink recomputed from the committed input: the compacted batches' ranges live on only in the merged
    # coverage, and are read from there.
    audit = commands.verify(scenario.pipeline, log=lambda _: None)
    assert audit.ok, [f.line() for f in audit.findings]
    assert any(f.check == "sink = transform(committed input)" and f.ok for f in audit.findings)


def test_finalize_compacts_the_ledger_every_nth_commit(settings, unique, monkeypatch) -> None:
    monkeypatch.setenv("EOSBATCH_COMPACT_EVERY", "2")
    monkeypatch.setenv("EOSBATCH_COMPACT_AFTER_DAYS", "0")
    scenario = Scenario(settings, unique, "totals", batch=500)
    done = scenario.run()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "ledger compacted" in done.stdout + done.stderr
    with store.transaction(settings) as cur:
        cur.execute("SELECT b.commit_seq, count(r.batch_id) FROM eosbatch.batches b LEFT JOIN eosbatch.batch_ranges r "
                    "ON r.batch_id = b.id WHERE b.pipeline = %s AND b.state = 'published' GROUP BY b.commit_seq "
                    "ORDER BY b.commit_seq", (scenario.pipeline,))
        detail = dict(cur.fetchall())
        assert len(detail) >= 4, detail
        # the last compaction ran after the batch of the last even commit_seq, and kept that batch's detail
        # (its task's asset and lineage events read it after finalize) and the later ones'
        last_compaction = max(detail) // 2 * 2
        cur.execute("SELECT count(*) FROM eosbatch.committed_ranges c JOIN eosbatch.batches b ON b.id = c.batch_id "
                    "WHERE c.pipeline = %s AND b.commit_seq < %s", (scenario.pipeline, last_compaction))
        merged = cur.fetchone()[0]
    assert {seq: n for seq, n in detail.items() if seq < last_compaction} == dict.fromkeys(
        range(1, last_compaction), 0)
    assert all(n > 0 for seq, n in detail.items() if seq >= last_compaction)
    assert merged == 3  # one run of offsets per partition
    scenario.assert_exactly_once()
