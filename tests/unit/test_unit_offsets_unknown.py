"""A ListOffsets answer without an offset (-1001, librdkafka's OFFSET_INVALID, seen while a partition's leader
moved during the soak) is a transient error, never a log's start or end: read as the log's end it made a runner
stop with a terminal SourceChanged that advised `eosbatch reset ... --to -1001`."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from eosbatch.config import Settings
from eosbatch.kafka import offsets
from eosbatch.kafka.exceptions import KafkaUnavailable
from eosbatch.protocol.ranges import PartitionBounds, TopicPartition

pytestmark = pytest.mark.unit


class _Answer:
    def __init__(self, offset: int) -> None:
        self.offset = offset

    def result(self) -> SimpleNamespace:
        return SimpleNamespace(offset=self.offset)


class _Admin:
    """list_offsets answers `latest` for the latest spec, 0 for the earliest."""

    def __init__(self, latest: dict[int, int]) -> None:
        self.latest = latest

    def list_offsets(self, request, isolation_level, request_timeout):  # noqa: ANN001, ANN201
        earliest = isinstance(next(iter(request.values())), type(offsets.OffsetSpec.earliest()))
        return {tp: _Answer(0 if earliest else self.latest[tp.partition]) for tp in request}


SETTINGS = Settings("postgresql://x@127.0.0.1:1/x", "127.0.0.1:9", {}, "local[1]")
TPS = [TopicPartition("orders", 0), TopicPartition("orders", 1)]


def test_offsets_kafka_gave_are_the_bounds() -> None:
    assert offsets._bounds(SETTINGS, _Admin({0: 12, 1: 7}), TPS) == {TPS[0]: PartitionBounds(0, 12),
                                                                      TPS[1]: PartitionBounds(0, 7)}


def test_an_answer_without_an_offset_is_transient_not_a_log_end() -> None:
    with pytest.raises(KafkaUnavailable, match=r"no offset for orders.*1.*retry"):
        offsets._bounds(SETTINGS, _Admin({0: 12, 1: -1001}), TPS)
