"""A pipeline's lanes in the ledger: each lane's epoch (which runner owns it) and its lease (which runner
holds it now). Every function takes an open cursor: the caller owns the transaction."""

from __future__ import annotations

from datetime import datetime

from eosbatch.ledger.connection import Cursor
from eosbatch.ledger.exceptions import StaleEpoch
from eosbatch.ledger.store import Batch
from eosbatch.protocol.lease import Lease
from eosbatch.protocol.states import Lane, lane

# Each lane's epoch column; fixed names, never input.
_EPOCH_COLUMN: dict[Lane, str] = {"regular": "epoch", "backfill": "backfill_epoch"}


def lock_pipeline(cur: Cursor, name: str, lane: Lane = "regular") -> int:
    """Create the pipeline's row if new and lock it for this transaction; returns the lane's epoch."""
    cur.execute("INSERT INTO eosbatch.pipelines (name) VALUES (%s) ON CONFLICT DO NOTHING", (name,))
    cur.execute(f"SELECT {_EPOCH_COLUMN[lane]} FROM eosbatch.pipelines WHERE name = %s FOR UPDATE",  # noqa: S608
                (name,))
    return int(cur.fetchone()[0])


def hold_lane(cur: Cursor, name: str, in_lane: Lane, epoch: int) -> None:
    """Lock the pipeline and check this runner still owns the lane (nobody recovered it since)."""
    if lock_pipeline(cur, name, in_lane) != epoch:
        raise StaleEpoch(f"pipeline {name!r}: another runner owns the {in_lane} lane now (this runner's epoch "
                         f"{epoch} is stale); this runner stops")


def bump_epoch(cur: Cursor, name: str, lane: Lane = "regular") -> int:
    column = _EPOCH_COLUMN[lane]
    cur.execute(f"UPDATE eosbatch.pipelines SET {column} = {column} + 1 WHERE name = %s "  # noqa: S608
                f"RETURNING {column}", (name,))
    return int(cur.fetchone()[0])


def read_lease(cur: Cursor, name: str, in_lane: Lane) -> tuple[Lease, datetime]:
    """The lane's lease, locked for this transaction, and the database's clock (never the client's).
    The pipeline's row must exist (lock_pipeline first)."""
    cur.execute("INSERT INTO eosbatch.lane_leases (pipeline, lane) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (name, in_lane))
    cur.execute("SELECT owner, expires_at, clock_timestamp() FROM eosbatch.lane_leases "
                "WHERE pipeline = %s AND lane = %s FOR UPDATE", (name, in_lane))
    owner, expires_at, now = cur.fetchone()
    return Lease(owner, expires_at), now


def take_lease(cur: Cursor, name: str, in_lane: Lane, owner: str, seconds: float, takeover: bool) -> Lease:
    """Give the lane to `owner` (read_lease locked it); `takeover`: from a holder that did not release it."""
    cur.execute("UPDATE eosbatch.lane_leases SET owner = %s, "
                "expires_at = clock_timestamp() + %s * interval '1 second', taken_at = clock_timestamp(), "
                "takeovers = takeovers + %s WHERE pipeline = %s AND lane = %s "
                "RETURNING owner, expires_at", (owner, seconds, int(takeover), name, in_lane))
    return Lease(*cur.fetchone())


def renew_lease(cur: Cursor, name: str, in_lane: Lane, owner: str, seconds: float) -> Lease | None:
    """Extend `owner`'s lease; None when the lane is no longer `owner`'s (taken over or released).
    A renewal never takes the lane: that is recovery's job, with an epoch bump."""
    cur.execute("UPDATE eosbatch.lane_leases SET expires_at = clock_timestamp() + %s * interval '1 second' "
                "WHERE pipeline = %s AND lane = %s AND owner = %s RETURNING owner, expires_at",
                (seconds, name, in_lane, owner))
    row = cur.fetchone()
    return None if row is None else Lease(*row)


def release_lease(cur: Cursor, name: str, in_lane: Lane, owner: str) -> bool:
    """Free the lane now if `owner` still holds it, so the next runner need not wait for the expiry."""
    cur.execute("UPDATE eosbatch.lane_leases SET owner = NULL, expires_at = NULL "
                "WHERE pipeline = %s AND lane = %s AND owner = %s", (name, in_lane, owner))
    return cur.rowcount == 1


def lane_leases(cur: Cursor, name: str) -> dict[str, tuple[Lease, int]]:
    """Each lane's lease and its takeover count, for status and tests."""
    cur.execute("SELECT lane, owner, expires_at, takeovers FROM eosbatch.lane_leases WHERE pipeline = %s",
                (name,))
    return {row[0]: (Lease(row[1], row[2]), int(row[3])) for row in cur.fetchall()}


def check_epoch(cur: Cursor, batch: Batch, lock: bool = False) -> None:
    """Refuse to act for a batch planned under an older epoch of its lane: a newer runner owns the lane."""
    column = _EPOCH_COLUMN[lane(batch.kind)]
    cur.execute(f"SELECT {column} FROM eosbatch.pipelines WHERE name = %s"  # noqa: S608
                + (" FOR UPDATE" if lock else ""), (batch.pipeline,))
    row = cur.fetchone()
    if row is None or int(row[0]) != batch.epoch:
        raise StaleEpoch(f"batch {batch.id}: another runner owns pipeline {batch.pipeline!r} now (the batch was "
                         f"planned in {lane(batch.kind)} epoch {batch.epoch}, the pipeline is in epoch "
                         f"{row[0] if row else '?'}); this runner stops")


def check_lane_epoch(cur: Cursor, batch: Batch, epoch: int) -> None:
    """Refuse to act for a runner whose epoch of the batch's lane is not the current one."""
    column = _EPOCH_COLUMN[lane(batch.kind)]
    cur.execute(f"SELECT {column} FROM eosbatch.pipelines WHERE name = %s", (batch.pipeline,))  # noqa: S608
    row = cur.fetchone()
    if row is None or int(row[0]) != epoch:
        raise StaleEpoch(f"batch {batch.id}: another runner owns pipeline {batch.pipeline!r} now "
                         f"({lane(batch.kind)} epoch {row[0] if row else '?'}, this runner's is {epoch}); it "
                         "publishes the batch, this runner stops")
