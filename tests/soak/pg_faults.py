"""The soak's PostgreSQL failover (issue 37, item 4, the synchronous kind only: a lossy failover stops the pipeline
by design), on the stack's streaming replica (`stack up --postgres-replica`) through tests/chaos/failover.Failover.

The primary is stopped like a power cut, the synchronous replica promoted; the runners, whose URL names both
servers with target_session_attrs=read-write, carry on against it. After a while the stack is put back as it was
(the primary on its own port with everything the promoted server holds, a fresh synchronous replica), so the
next failover finds the same shape."""

from __future__ import annotations

import time

from eosbatch.stack import replica
from eosbatch.stack.processes import alive
from tests.chaos.failover import Failover
from tests.soak.faults import World

RUN_ON_PROMOTED_SECONDS = 30.0  # batches commit on the promoted server before the stack is put back


def committed_batches(world: World) -> int:
    from eosbatch.ledger import store

    with store.transaction(world.scenario.settings) as cur:
        cur.execute("SELECT count(*) FROM eosbatch.batches WHERE pipeline = %s AND commit_seq IS NOT NULL",
                    (world.scenario.pipeline,))
        return int(cur.fetchone()[0])


class SyncFailover:
    name = "postgres_sync_failover"
    weight = 1.0
    confirmation = "the old primary's postmaster gone, the replica's port answers as a primary (not in recovery)"

    def __init__(self) -> None:
        self.failover = Failover()

    def inject(self, world: World) -> str:
        failover = self.failover
        assert replica.synchronous(failover.primary), "the replica is not synchronous: this failover could lose"
        old = failover.stop_primary_immediately()
        assert not alive(old), f"the primary's postmaster {old} is still alive"
        failover.promote_replica()
        assert replica.role(failover.replica) == "primary", "the replica was not promoted"
        before = committed_batches(world)
        time.sleep(RUN_ON_PROMOTED_SECONDS)  # the pipeline runs on the promoted server meanwhile
        on_promoted = committed_batches(world) - before
        failover.restore()
        assert replica.role(failover.primary) == "primary" and replica.synchronous(failover.primary), \
            "the stack was not put back with a synchronous replica"
        return (f"primary (pid {old}) stopped immediately; replica on port {failover.replica.port} promoted, "
                f"{on_promoted} batches committed on it in {RUN_ON_PROMOTED_SECONDS:.0f}s; stack put back "
                f"(primary pid {failover.primary.pid()}, a fresh synchronous replica)")
