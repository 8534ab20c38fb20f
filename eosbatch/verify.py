"""The exactly-once check, from the outside: read what Kafka and PostgreSQL hold and compare.

Used by the demo, the tests and the benchmark; it reads Kafka with read_committed, as a user would.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, NamedTuple

from eosbatch.config import Settings
from eosbatch.context import Context
from eosbatch.kafka import avro, record
from eosbatch.kafka.read_back import OpenTransaction, Record, read_topic
from eosbatch.ledger import audit as ledger
from eosbatch.ledger import claims, positions, store
from eosbatch.ledger.sinks.names import DELETED_COLUMN
from eosbatch.lost_output import lost_output
from eosbatch.outputs import AvroValue
from eosbatch.protocol.ranges import OffsetRange
from eosbatch.protocol.sources import coverage_problems
from eosbatch.verify_sequence import commit_order


class OutputCheck(NamedTuple):
    records: int
    duplicates: list[tuple[str, bytes | None]]
    unknown_batches: list[str]
    count_mismatches: dict[int, tuple[int | None, int]]

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.unknown_batches or self.count_mismatches)


def _ours(records: list[Record], pipeline: str) -> list[Record]:
    return [r for r in records if record.is_from(r.headers, pipeline)]


def check_output(settings: Settings, pipeline: str, topic: str, records: list[Record] | None = None
                 ) -> OutputCheck:
    """Every published batch's records appear exactly once among read_committed records, and no other.

    The expected count is the one the commit fixed (`outbox_records`, written in the commit transaction),
    not the count the publisher reported: a publisher that produced nothing must not pass. (A batch committed
    by an eosbatch older than the outbox has no such count; the publisher's own is all there is for it.)
    This holds publish to the commit; `audit`'s recompute holds the commit to the input."""
    records = read_topic(settings, topic) if records is None else records
    ours = _ours(records, pipeline)
    # (batch, seq) identifies an output record; a batch from before the outbox has no seq: (batch, key).
    pairs = Counter((record.batch_of(r.headers), record.seq_of(r.headers) or r.key) for r in ours)
    per_batch = Counter(record.batch_of(r.headers) for r in ours)
    with store.transaction(settings) as cur:
        batches = ledger.output_counts(cur, pipeline)
    # A committed batch's records may be in Kafka already (published, not yet finalized): not unknown.
    unknown = sorted(b for b in per_batch if batches.get(b, ("?",))[0] not in ("published", "committed"))
    mismatches: dict[int, tuple[int | None, int]] = {}
    for b, (state, publish, fixed, published) in batches.items():
        expected = fixed if fixed is not None else published  # older batches: the publisher's own count
        if not publish:
            expected = 0
        if state == "published" and expected is not None and expected != per_batch.get(b, 0):
            mismatches[int(b)] = (expected, per_batch.get(b, 0))
        if state == "committed" and per_batch.get(b, 0) not in (0, expected):
            mismatches[int(b)] = (expected, per_batch.get(b, 0))
    return OutputCheck(len(ours), [p for p, n in pairs.items() if n > 1], unknown, mismatches)


def coverage_gaps(settings: Settings, pipeline: str) -> dict[str, list[OffsetRange]]:
    """Per partition and incarnation, the merged committed coverage when, with the gaps that resets declared,
    it is not one piece ending where the pipeline left that incarnation (its next offset, or the reset that
    started the next incarnation). Keys: "topic:partition", "topic:partition#N" for an earlier incarnation N."""
    with store.transaction(settings) as cur:
        covered = claims.coverage_by_incarnation(cur, pipeline)
        where = positions.incarnations(cur, pipeline)
        resets = [r for _, _, _, r in positions.resets(cur, pipeline)]
    return coverage_problems(covered, where, resets)


def declared_gaps(settings: Settings, pipeline: str) -> list[str]:
    """The resets an operator made: offsets skipped on purpose, or a move to a new incarnation, with why."""
    with store.transaction(settings) as cur:
        return [f"reset {i} at {when.isoformat(timespec='seconds')}: {reset} ({reason})"
                for i, when, reason, reset in positions.resets(cur, pipeline)]


# ---------------------------------------------------------------- the audit: `eosbatch verify PIPELINE`

_MARKS = {True: "ok  ", False: "FAIL", None: "skip"}


class Finding(NamedTuple):
    check: str
    ok: bool | None     # None: skipped (the reason says why)
    detail: str

    def line(self) -> str:
        return f"{_MARKS[self.ok]} {self.check}: {self.detail}"


class Audit(NamedTuple):
    pipeline: str
    findings: list[Finding]

    @property
    def ok(self) -> bool:
        return all(f.ok is not False for f in self.findings)

    @property
    def violations(self) -> list[Finding]:
        return [f for f in self.findings if f.ok is False]


def audit(ctx: Context, recompute: bool = True) -> Audit:
    """Recompute from the outside what must hold for a pipeline, never trusting counts the publisher wrote:

    - coverage: committed ranges never overlap, and form one piece per partition up to the next offset;
    - output: every published batch's records appear exactly once among the read_committed records of the
      output topic, as many as its commit wrote to the outbox; no record of an unknown or aborted batch;
    - commit order (verify_sequence): the commit sequence numbers run without a hole up to the pipeline's
      counter and never go back within a lane; each batch's records come from one Kafka transaction (their
      attempt header) and carry its number;
    - sink vs output: key by key, the last record published equals the sink row (replace; after a tombstone
      the key is absent), or the published deltas add up to the stored totals (accumulate);
    - sink vs input (`recompute`, runs Spark): the transform applied to the committed input gives the sink
      (a key whose latest is a tombstone is absent), and every malformed record of the committed input (a
      tombstone the sink cannot take, too) is a dead letter.
    """
    settings, pipeline, log = ctx.settings, ctx.pipeline, ctx.log
    findings: list[Finding] = []
    with store.transaction(settings) as cur:
        overlaps = ledger.overlapping_ranges(cur, pipeline.name)
        batches = ledger.batch_summaries(cur, pipeline.name)
    gaps = coverage_gaps(settings, pipeline.name)
    declared = declared_gaps(settings, pipeline.name)
    findings.append(Finding("coverage", not overlaps and not gaps,
                            "every committed offset once, no holes" if not overlaps and not gaps else
                            f"{overlaps} overlapping ranges; holes or an end short of the next offset: {gaps}"))
    behind = lost_output(settings, pipeline)  # the regular marker past the ledger: batches the ledger lost
    findings.append(Finding("ledger not behind the output", not behind,
                            "the regular marker group is within the ledger" if not behind else
                            f"Kafka published ranges the ledger lost: {', '.join(map(str, behind))}; "
                            f"`eosbatch adopt-published {pipeline.name}`"))
    if declared:  # not a violation: an operator skipped these on purpose, and the ledger says so
        findings.append(Finding("declared gaps", None, "; ".join(declared)))
    pending = [i for i, state, _, _ in batches if state in ("planned", "staged", "committed")]
    if pending:
        findings.append(Finding("settled", None, f"batches {pending} are not finished yet: the checks below may "
                                                 "change when they are (run the pipeline, then verify)"))
    records: list[Record] = []
    unreadable: OpenTransaction | None = None
    try:
        records = read_topic(settings, pipeline.output.topic) if pipeline.output is not None else []
    except OpenTransaction as exc:
        unreadable = exc
    if unreadable is not None:  # not a pass: what lies behind the open transaction is unchecked
        findings.append(Finding("output", False, f"cannot be checked yet: {unreadable}"))
    elif pipeline.output is not None:
        check = check_output(settings, pipeline.name, pipeline.output.topic, records)
        findings.append(Finding("output", check.ok, f"{check.records} records, each published batch's count as "
                                                    "committed, no duplicates" if check.ok else
                                f"duplicates {check.duplicates[:5]}, records of unknown batches "
                                f"{check.unknown_batches[:5]}, (expected, found) per batch "
                                f"{dict(list(check.count_mismatches.items())[:5])}"))
        ordered, detail = commit_order(settings, pipeline.name, _ours(records, pipeline.name))
        findings.append(Finding("commit order", ordered, detail))
        silent = [i for i, state, kind, publish in batches if state == "published" and not publish]
        if silent or pending:
            findings.append(Finding("sink = output", None, "skipped: batches published nothing on purpose "
                                    f"({silent})" if silent else "skipped: batches in flight"))
        else:
            findings.append(_sink_vs_output(settings, pipeline, records))
    if pipeline.output is None:
        findings.append(Finding("commit order", *commit_order(settings, pipeline.name, None)))
    with store.transaction(settings) as cur:
        moved = [r for _, _, _, r in positions.resets(cur, pipeline.name) if r.to_incarnation != r.from_incarnation]
    if recompute and moved:  # the earlier incarnation's records are gone from Kafka (or replaced): unreadable
        findings.append(Finding("sink = transform(committed input)", None, "skipped: the sink holds records of an "
                                f"earlier incarnation of {', '.join(sorted({str(r.tp) for r in moved}))} that "
                                "Kafka no longer has"))
    elif recompute:
        log("verify: recomputing the sink from the committed input with Spark")
        findings += _sink_vs_input(settings, pipeline)
    return Audit(pipeline.name, findings)


def _sink_rows(settings: Settings, pipeline: Any, columns: list[str]) -> dict[tuple[Any, ...], dict[str, Any]]:
    with store.transaction(settings) as cur:
        rows = ledger.sink_rows(cur, pipeline, columns)
    return {tuple(_same(r[k]) for k in pipeline.sink.key): r for r in rows}


_HEX = re.compile(r"(?:[0-9a-f]{2})*")


def _same(value: Any) -> Any:
    """A value as both sides can compare it: JSON, Spark and psycopg2 spell numbers differently."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (list, tuple)):  # an array column
        return tuple(_same(v) for v in value)
    if isinstance(value, dict):  # a jsonb column: its JSON, keys sorted
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, (int, Decimal)):
        return Decimal(value).normalize()
    if isinstance(value, float):
        return Decimal(repr(value)).normalize()
    if isinstance(value, datetime):  # an instant in UTC (an Avro timestamp of a column without zone: UTC)
        return (value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, (bytes, memoryview)):  # as the recompute spells binary (spark/recompute.py)
        return bytes(value).hex()
    if isinstance(value, str) and value.startswith("\\x") and _HEX.fullmatch(value[2:]):
        return value[2:]  # a bytea as row_to_json spells it
    if isinstance(value, str) and value[:4].isdigit() and value[4:5] == "-" and len(value) > 10:
        try:  # a timestamp spelled by row_to_json or by Python: compare the instants, not the spelling
            return _same(datetime.fromisoformat(value))
        except ValueError:
            return value
    return str(value)


def _value(pipeline: Any, data: bytes) -> dict[str, Any]:
    """An output record's value as a dict: JSON, or Avro decoded with the pipeline's schema."""
    value = pipeline.output.value
    if isinstance(value, AvroValue):
        return avro.decode(value, data)
    return json.loads(data)  # type: ignore[no-any-return]


def _too_big(pipeline: Any, too_big: set[str]) -> Callable[[dict[str, Any]], bool]:
    """Whether a recomputed row is one the commit refused as too big (its dead letter holds its key's text)."""
    output = pipeline.output
    if output is None or not too_big:
        return lambda row: False
    if not output.composite:
        return lambda row: str(row[output.key]) in too_big
    refused = {tuple(_same(json.loads(k).get(c)) for c in output.key_columns) for k in too_big}
    return lambda row: tuple(_same(row[c]) for c in output.key_columns) in refused


def _sink_vs_output(settings: Settings, pipeline: Any, records: list[Record]) -> Finding:
    ours = sorted(_ours(records, pipeline.name), key=lambda r: record.commit_order(r.headers))
    rows = [_value(pipeline, r.value) for r in ours if r.value is not None]
    columns = sorted({c for row in rows for c in row})
    if not rows:
        sink = _sink_rows(settings, pipeline, list(pipeline.sink.key))
        return Finding("sink = output", not sink, "both empty" if not sink else
                       f"the sink holds {len(sink)} keys and the output topic none of them")
    sink = _sink_rows(settings, pipeline, columns)
    expected: dict[tuple[Any, ...], dict[str, Any]] = {}
    keys: dict[bytes | None, tuple[Any, ...]] = {}  # a record's Kafka key -> its sink key, for tombstones
    for r in ours:
        if r.value is None:  # a tombstone: the sink deleted the key its earlier records carried
            expected.pop(keys.get(r.key, ()), None)
            continue
        row = _value(pipeline, r.value)
        key = tuple(_same(row[k]) for k in pipeline.sink.key)
        keys[r.key] = key
        if pipeline.sink.mode == "accumulate":
            total = expected.setdefault(key, {c: row[c] for c in pipeline.sink.key})
            for c in pipeline.sink.accumulate:
                total[c] = _same(total.get(c) or 0) + _same(row[c] or 0)
        else:
            expected[key] = row
    differ = [k for k in set(sink) | set(expected)
              if k not in sink or k not in expected
              # .get: a record published before an evolving sink gained a column lacks it (the row holds NULL)
              or any(_same(sink[k][c]) != _same(expected[k].get(c)) for c in columns)]
    first = sorted(differ, key=str)[:1]
    return Finding("sink = output", not differ, f"{len(sink)} keys agree" if not differ else
                   f"{len(differ)} of {len(set(sink) | set(expected))} keys differ, e.g. key {first}: "
                   f"sink {[sink.get(k) for k in first]}, output {[expected.get(k) for k in first]}")


def _sink_vs_input(settings: Settings, pipeline: Any) -> list[Finding]:
    """Run the pipeline's transform over the committed input on Spark (eosbatch.spark.recompute) and compare."""
    from eosbatch import engine

    recomputed = engine.recompute(Context(settings, pipeline))
    findings: list[Finding] = []
    columns: list[str] = recomputed["columns"] or list(pipeline.sink.key)
    sink = _sink_rows(settings, pipeline, columns)
    with store.transaction(settings) as cur:  # rows the commit refused as too big for the output topic
        too_big = ledger.oversize_keys(cur, pipeline.name)
    expected: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    refused = _too_big(pipeline, too_big)
    for row in recomputed["rows"]:
        if refused(row):
            continue
        expected.setdefault(tuple(_same(row[k]) for k in pipeline.sink.key), []).append(row)
    if pipeline.sink.mode == "accumulate":
        differ = [k for k in set(sink) | set(expected)
                  if k not in sink or k not in expected
                  or any(_same(sink[k][c]) != sum((_same(r[c] or 0) for r in expected[k]), Decimal(0))
                         for c in pipeline.sink.accumulate)]
    else:
        order = list(pipeline.sink.order_by)

        def acceptable(key: tuple[Any, ...]) -> bool:
            candidates = expected[key]
            if order:  # only a row with the highest order_by value can be the latest
                best = max((tuple(_same(r[c]) for c in order) for r in candidates
                            if all(r[c] is not None for c in order)), default=None)
                candidates = [r for r in candidates if best is None or tuple(_same(r[c]) for c in order) == best]
            elif pipeline.sink.deletes is not None:  # only the last row or tombstone of a source partition
                candidates = _last_per_source(candidates)
            if key not in sink:  # deleted: its latest was a tombstone
                return any(r.get(DELETED_COLUMN) for r in candidates)
            return any(all(_same(sink[key][c]) == _same(r[c]) for c in columns) for r in candidates
                       if not r.get(DELETED_COLUMN))

        differ = [k for k in set(sink) | set(expected) if k not in expected or not acceptable(k)]
    findings.append(Finding("sink = transform(committed input)", not differ,
                            f"{len(sink)} keys recomputed from {recomputed['records']} committed input records"
                            if not differ else f"{len(differ)} of {len(set(sink) | set(expected))} keys differ, "
                            f"e.g. {sorted(differ, key=str)[:3]} (sink has {len(sink)} keys, the recompute "
                            f"{len(expected)})"))
    with store.transaction(settings) as cur:
        dead = ledger.committed_malformed(cur, pipeline.name)
    malformed = {tuple(p) for p in recomputed["malformed"]}
    findings.append(Finding("dead letters = malformed committed input", dead == malformed,
                            f"{len(dead)} dead letters" if dead == malformed else
                            f"{len(malformed - dead)} malformed records are not dead letters (e.g. "
                            f"{sorted(malformed - dead)[:3]}), {len(dead - malformed)} dead letters are not "
                            "malformed"))
    return findings


def _last_per_source(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of a key's recomputed rows (and tombstones), the last of each source partition: without order_by the
    higher offset of one partition always wins, whatever the lane (eosbatch.ledger.sinks.latest)."""
    last: dict[tuple[Any, Any], dict[str, Any]] = {}
    for row in candidates:
        source = (row.get("topic"), row.get("partition"))
        if source not in last or row["offset"] > last[source]["offset"]:
            last[source] = row
    return list(last.values())


# ---------------------------------------------------------------- one batch: `eosbatch verify PIPELINE --batch N`

CLOCK_SLACK_MS = 5 * 60_000  # output records are stamped by the publisher's clock, the commit by PostgreSQL's


def audit_batch(ctx: Context, batch_id: int) -> Audit:
    """A cheap check of one finished batch, for the end of each run: its ranges are what it committed, the
    ledger's dead-letter count is what the dead-letter table holds for it, and its output records (found
    in the output topic, read_committed, by their headers, from its commit time on) are exactly the
    commit's count, each once."""
    settings, pipeline = ctx.settings, ctx.pipeline
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id)
        committed = ledger.committed_ranges_of(cur, batch_id)
        dead = ledger.dead_letter_count(cur, pipeline.name, batch_id)
    name = f"{pipeline.name} batch {batch_id}"
    if batch.pipeline != pipeline.name:
        return Audit(name, [Finding("batch", False, f"batch {batch_id} belongs to pipeline {batch.pipeline}")])
    if batch.state != "published":
        return Audit(name, [Finding("batch", None, f"{batch.state}: only a published batch is checked")])
    if not batch.ranges:  # eosbatch compact merged its ranges into the coverage: its output is still checked
        findings = [Finding("batch", None, "compacted: its ranges are part of the merged committed coverage")]
        return Audit(name, [*findings, *_batch_output(settings, pipeline, batch, dead)])
    findings = [Finding("batch", True, f"published, {len(batch.ranges)} ranges")]
    planned = sorted(batch.ranges)
    if batch.kind in ("regular", "backfill"):
        findings.append(Finding("coverage", committed == planned, "its ranges are the committed ones"
                                if committed == planned else f"planned {planned}, committed {committed}"))
    return Audit(name, [*findings, *_batch_output(settings, pipeline, batch, dead)])


def _batch_output(settings: Settings, pipeline: Any, batch: store.Batch, dead: int) -> list[Finding]:
    """A published batch's dead letters and output records against what its commit fixed."""
    findings = [Finding("dead letters", dead == batch.dead_letters,
                        f"{dead} in eosbatch.dead_letters, as the ledger says" if dead == batch.dead_letters
                        else f"the ledger says {batch.dead_letters}, eosbatch.dead_letters holds {dead}")]
    if pipeline.output is None:
        return findings
    batch_id = batch.id
    expected = (batch.outbox_records or 0) if batch.publish else 0
    since = int(batch.committed_at.timestamp() * 1000) - CLOCK_SLACK_MS if batch.committed_at else None
    try:
        records = read_topic(settings, pipeline.output.topic, since_ms=since)
    except OpenTransaction as exc:
        return [*findings, Finding("output", False, f"cannot be checked yet: {exc}")]
    ours = [r for r in _ours(records, pipeline.name) if record.is_of_batch(r.headers, batch_id)]
    seqs = Counter(record.seq_of(r.headers) for r in ours)
    repeated = sorted(int(s) for s, n in seqs.items() if s is not None and n > 1)
    good = len(ours) == expected and not repeated and batch.published_records in (None, expected)
    findings.append(Finding("output", good, f"{len(ours)} records in {pipeline.output.topic}, as committed, "
                            "each once" if good else f"the commit wrote {expected} to the outbox, the ledger says "
                            f"{batch.published_records} published, {pipeline.output.topic} holds {len(ours)} "
                            f"(repeated seq: {repeated[:5]})"))
    return findings
