"""What a run of many batches did, counted over its finished batches."""

from __future__ import annotations

from typing import NamedTuple

from eosbatch.ledger import store


class RunSummary(NamedTuple):
    batches: int
    records_read: int
    sink_rows: int
    dead_letters: int
    published: int

    def add(self, done: store.Batch) -> RunSummary:
        """This summary with one more finished batch counted."""
        return RunSummary(self.batches + 1, self.records_read + (done.records_read or 0),
                          self.sink_rows + (done.sink_rows or 0), self.dead_letters + (done.dead_letters or 0),
                          self.published + (done.published_records or 0))
