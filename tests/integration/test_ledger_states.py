"""A batch's state moves against the real ledger: a move that another transaction overtook is made from the
state the batch is in now, when the protocol allows it, and refused otherwise; never reported as done
without happening."""

from __future__ import annotations

import pytest

from eosbatch.ledger import lanes, store
from eosbatch.protocol.exceptions import IllegalTransition

pytestmark = pytest.mark.integration


def test_a_batch_moved_meanwhile_is_moved_from_where_it_is_now_or_refused(settings, unique) -> None:
    name = f"states_{unique}"
    with store.transaction(settings) as cur:
        lanes.lock_pipeline(cur, name)
        held = store.create_batch(cur, name, "regular", 0, [], "g")  # what recovery read: planned
    with store.transaction(settings) as cur:  # meanwhile its Spark driver marks it staged
        store.set_state(cur, held, "staged")
    with store.transaction(settings) as cur:  # recovery aborts the batch it read as planned
        assert store.set_state(cur, held, "aborted", error="aborted by recovery").state == "aborted"
    with store.transaction(settings) as cur:
        stored = store.get_batch(cur, held.id)
    assert (stored.state, stored.error) == ("aborted", "aborted by recovery")
    with pytest.raises(IllegalTransition, match="is aborted; it cannot become staged"), \
            store.transaction(settings) as cur:  # planned -> staged is legal for what the driver holds: not now
        store.set_state(cur, held, "staged")
