"""Zombies: a runner whose epoch is stale cannot commit; a publisher fenced by a newer one cannot commit."""

from __future__ import annotations

import pytest

from eosbatch import KafkaSource, Pipeline, PostgresSink, registry, steps
from eosbatch.kafka.exceptions import PublisherFenced
from eosbatch.kafka.publisher import TransactionalPublisher
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import claims, positions, store
from eosbatch.ledger.exceptions import StaleEpoch
from eosbatch.protocol.ranges import OffsetRange
from examples.orders import generate
from tests.scenario import context

pytestmark = pytest.mark.integration


def test_commit_with_a_stale_epoch_is_rejected_and_changes_nothing(settings, unique, monkeypatch):
    topic = f"fence_in_{unique}"
    generate.ensure_topics(settings, {topic: 2})
    generate.generate(settings, topic, records=300, partitions=2, abort_every=0)
    registry.register(Pipeline(name=f"fence_{unique}", source=KafkaSource(topics=[topic]), transform=lambda df: df,
                               sink=PostgresSink(table=f"fence_{unique}", key=["offset"])))
    name = f"fence_{unique}"
    zombie = steps.plan(context(name))
    assert zombie is not None and zombie.state == "planned"
    steps.recover(context(name))  # a new runner takes over: epoch bumped, the zombie's batch aborted
    with pytest.raises(StaleEpoch):
        steps.commit(context(name), zombie.id)
    with store.transaction(settings) as cur:
        assert store.get_batch(cur, zombie.id).state == "aborted"
        assert claims.committed_coverage(cur, name) == []
        assert set(positions.next_offsets(cur, name).values()) == {0}
    again = steps.plan(context(name))
    assert again is not None and again.ranges == zombie.ranges  # the same ranges, planned again


def test_a_second_publisher_fences_the_first(settings, unique):
    out = f"fence_out_{unique}"
    generate.ensure_topics(settings, {out: 1})
    tid = f"eosbatch.fence-{unique}"
    first = TransactionalPublisher(settings, tid)
    first.init()
    first.begin()
    first.produce(out, [(b"k", b"from the zombie")], headers=[])
    second = TransactionalPublisher(settings, tid)
    second.init()  # fences `first` and aborts its open transaction
    with pytest.raises(PublisherFenced):
        first.commit(settings, f"marker-{unique}", [OffsetRange(out, 0, 0, 1)])
    second.begin()
    second.produce(out, [(b"k", b"from the new publisher")], headers=[])
    second.commit(settings, f"marker-{unique}", [OffsetRange(out, 0, 0, 1)])
    second.close()
    first.close()
    assert [r.value for r in read_topic(settings, out)] == [b"from the new publisher"]
    assert len(read_topic(settings, out, "read_uncommitted")) == 2
