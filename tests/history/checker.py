"""The anomalies of a history (tests/history/history.py): a pure function, value in, list out.

Each check is a function of the History alone; `check` runs them all. What each one means, and why it holds
for eosbatch's protocol: docs/history-checker.md."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

from tests.history.history import (
    ATTEMPT,
    BATCH,
    COMMIT_SEQ,
    COVERING,
    FINISHED,
    PIPELINE,
    SEQ,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
    Anomaly,
    Batch,
    History,
    Range,
    Record,
)

Decode = Callable[[bytes], dict[str, Any]]
SHOWN = 5  # examples named per anomaly


def check(history: History, decode: Decode | None = None, caught_up: bool = False) -> list[Anomaly]:
    """Every anomaly of `history`. `decode` turns an output value into its columns (default: JSON); with
    `caught_up`, an input record past the next offset is lost too (the pipeline was run until caught up)."""
    found = [*coverage(history), *commit_sequence(history), *output(history)]
    if caught_up:
        found += unread_input(history)
    if history.sink is not None and history.output is not None and not history.unsettled:
        found += sink_vs_output(history, decode or json_value)
    found += dead_letters(history)
    return found


def json_value(data: bytes) -> dict[str, Any]:
    """A JSON output value, its numbers exact."""
    value: dict[str, Any] = json.loads(data, parse_float=Decimal)
    return value


def _some(items: Iterable[Any]) -> str:
    items = sorted(items, key=str)
    return f"{items[:SHOWN]}{' ...' if len(items) > SHOWN else ''} ({len(items)})"


def _merge(ranges: Iterable[Range]) -> list[Range]:
    merged: list[Range] = []
    for r in sorted(ranges):
        if merged and merged[-1][:2] == r[:2] and merged[-1].incarnation == r.incarnation \
                and r.start <= merged[-1].end:
            merged[-1] = merged[-1]._replace(end=max(merged[-1].end, r.end))
        else:
            merged.append(r)
    return merged


# ---------------------------------------------------------------- the ledger's coverage

def covering(history: History) -> list[tuple[int, Range]]:
    """(batch, range) of every committed claim: committed_ranges, and the batch ranges of committed batches that
    claim coverage (the same rows until compaction merges them and drops the batch's own)."""
    claims = set(history.coverage)
    for b in history.batches:
        if b.state in FINISHED and b.kind in COVERING:
            claims.update((b.id, r) for r in b.ranges)
    return sorted(claims)


def coverage(history: History) -> list[Anomaly]:
    """overlap: two batches claim one offset; lost-input: a hole below the next offset of the incarnation read
    now (declared skips aside), or coverage ending short of it; the coverage running past the next offset is a
    regression of the next offset (a planned batch would read those offsets again)."""
    found: list[Anomaly] = []
    claims = covering(history)
    by_partition: dict[tuple[str, int, int], list[tuple[int, Range]]] = defaultdict(list)
    for batch_id, r in claims:
        by_partition[(r.topic, r.partition, r.incarnation)].append((batch_id, r))
    overlaps = [(a, ra, b, rb) for held in by_partition.values() for i, (a, ra) in enumerate(held)
                for b, rb in held[i + 1:] if a != b and ra.overlaps(rb)]
    if overlaps:
        found.append(Anomaly("overlap", f"batches covering the same offsets: {_some(overlaps)}"))
    for (topic, partition), (incarnation, next_offset) in sorted(history.next_offsets.items()):
        held = [r for _, r in by_partition.get((topic, partition, incarnation), [])]
        held += [d for d in history.declared if (d.topic, d.partition, d.incarnation) == (topic, partition,
                                                                                          incarnation)]
        pieces = _merge(held)
        where = f"{topic}:{partition}" + (f"#{incarnation}" if incarnation else "")
        if len(pieces) > 1:
            holes = [(a.end, b.start) for a, b in zip(pieces, pieces[1:], strict=False)]
            found.append(Anomaly("lost-input", f"{where}: offsets no committed batch covers: {_some(holes)}"))
        if pieces and pieces[-1].end < next_offset:
            found.append(Anomaly("lost-input", f"{where}: the next offset is {next_offset}, the coverage ends at "
                                               f"{pieces[-1].end}"))
        if pieces and pieces[-1].end > next_offset:
            found.append(Anomaly("commit-seq-regression", f"{where}: the coverage ends at {pieces[-1].end}, "
                                                          f"past the next offset {next_offset}"))
    return found


def unread_input(history: History) -> list[Anomaly]:
    """With the pipeline run until caught up, every input record is below its partition's next offset."""
    late = [(r.topic, r.partition, r.offset) for r in history.inputs or []
            if r.offset >= history.next_offsets.get((r.topic, r.partition), (0, 0))[1]]
    return [Anomaly("lost-input", f"input records past the next offset: {_some(late)}")] if late else []


# ---------------------------------------------------------------- the commit sequence

def commit_sequence(history: History) -> list[Anomaly]:
    """Each committed batch holds its own number; together they run 1.. up to the pipeline's counter without a
    hole (batches committed before numbering have none: from the first numbered on); within a lane a later batch
    holds a higher number."""
    found: list[Anomaly] = []
    numbered = [b for b in history.batches if b.state in FINISHED and b.commit_seq is not None]
    seqs = Counter(b.commit_seq for b in numbered if b.commit_seq is not None)
    twice = [s for s, n in seqs.items() if n > 1]
    if twice:
        found.append(Anomaly("commit-seq-regression", f"numbers held by more than one batch: {_some(twice)}"))
    if seqs:
        first, last = min(seqs), max(seqs)
        missing = sorted(set(range(first, last + 1)) - set(seqs))
        if missing:
            found.append(Anomaly("commit-seq-gap", f"numbers no committed batch holds: {_some(missing)}"))
        if history.commit_counter < last:
            found.append(Anomaly("commit-seq-regression", f"the pipeline's counter is {history.commit_counter}, "
                                                          f"behind the batches' {last}"))
        elif history.commit_counter > last:
            found.append(Anomaly("commit-seq-gap", f"the pipeline's counter is {history.commit_counter}; the last "
                                                   f"committed batch holds {last}"))
    for lane in ("regular", "backfill"):
        ordered = sorted((b for b in numbered if (b.kind == "regular") == (lane == "regular")), key=lambda b: b.id)
        back = [(a.id, a.commit_seq, b.id, b.commit_seq) for a, b in zip(ordered, ordered[1:], strict=False)
                if b.commit_seq is not None and a.commit_seq is not None and b.commit_seq < a.commit_seq]
        if back:
            found.append(Anomaly("commit-seq-regression", f"{lane} lane: a later batch with a lower number "
                                                          f"(batch, seq, batch, seq): {_some(back)}"))
    return found


# ---------------------------------------------------------------- the output topic

def _ours(history: History, records: list[Record] | None) -> list[Record]:
    return [r for r in records or [] if r.headers.get(PIPELINE) == history.pipeline.encode()]


def _int(value: bytes | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def aborted_attempts(history: History) -> set[bytes]:
    """The attempts (Kafka transactions) with a record read_uncommitted that read_committed does not show: the
    transaction aborted (the output is settled, so none is open)."""
    visible = {(r.partition, r.offset) for r in history.output or []}
    return {r.headers[ATTEMPT] for r in _ours(history, history.uncommitted)
            if ATTEMPT in r.headers and (r.partition, r.offset) not in visible}


def output(history: History) -> list[Anomaly]:
    """The read_committed output against the ledger: each published batch's records once, as many as its
    commit wrote to the outbox, from one attempt that did not abort; no record of any other batch; each source
    record's output from one batch; a batch's number in its records' headers; the regular lane's numbers never
    going back along a partition."""
    if history.output is None:
        return []
    if history.unsettled:
        return [Anomaly("unsettled", history.unsettled)]
    found: list[Anomaly] = []
    ours = _ours(history, history.output)
    batches = {b.id: b for b in history.batches}
    per_batch: dict[int, list[Record]] = defaultdict(list)
    unknown: set[int | None] = set()
    for r in ours:
        batch_id = _int(r.headers.get(BATCH))
        batch = batches.get(batch_id)  # type: ignore[arg-type]
        if batch is None or batch.state not in FINISHED:
            unknown.add(batch_id)
        else:
            per_batch[batch.id].append(r)
    if unknown:
        found.append(Anomaly("unknown-batch", f"read_committed records of batches not committed: {_some(unknown)}"))
    aborted = aborted_attempts(history)
    read_aborted = [(r.partition, r.offset, r.headers[ATTEMPT].decode()) for r in ours
                    if r.headers.get(ATTEMPT) in aborted]
    if read_aborted:
        found.append(Anomaly("aborted-read", f"records of aborted attempts visible read_committed (or of a torn "
                                             f"one, the rest of it not visible): {_some(read_aborted)}"))
    twice, short, extra, mixed, renumbered = [], [], [], [], []
    for batch_id, held in per_batch.items():
        batch = batches[batch_id]
        seqs = Counter(r.headers.get(SEQ) or r.key for r in held)
        twice += [(batch_id, s) for s, n in seqs.items() if n > 1]
        expected = batch.outbox_records if batch.outbox_records is not None else batch.published_records
        if not batch.publish:
            expected = 0
        if expected is not None and len(seqs) < expected and batch.state == "published":
            short.append((batch_id, expected, len(seqs)))
        if expected is not None and len(seqs) > expected:
            extra.append((batch_id, expected, len(seqs)))
        attempts = {r.headers.get(ATTEMPT) for r in held}
        if len(attempts) > 1:
            mixed.append((batch_id, sorted(a.decode() if a else "-" for a in attempts)))
        numbers = {_int(r.headers.get(COMMIT_SEQ)) for r in held}
        if batch.commit_seq is not None and numbers != {batch.commit_seq}:
            renumbered.append((batch_id, batch.commit_seq, sorted(n or 0 for n in numbers)))
    if twice:
        found.append(Anomaly("duplicate-output", f"(batch, seq) read_committed more than once: {_some(twice)}"))
    if extra:
        found.append(Anomaly("duplicate-output", f"batches with more records than their commit wrote (batch, "
                                                 f"committed, found): {_some(extra)}"))
    if short:
        found.append(Anomaly("lost-output", f"published batches with fewer records than their commit wrote "
                                            f"(batch, committed, found): {_some(short)}"))
    if mixed:
        found.append(Anomaly("aborted-read", f"batches visible from more than one attempt: {_some(mixed)}"))
    if renumbered:
        found.append(Anomaly("commit-seq-regression", f"records whose commit_seq header is not their batch's "
                                                      f"(batch, ledger, headers): {_some(renumbered)}"))
    found += _source_twice(ours, batches) + _regular_order(ours, batches)
    return found


def _source_twice(ours: list[Record], batches: dict[int, Batch]) -> list[Anomaly]:
    """A source record's output published by two batches that claim coverage: it was processed twice."""
    by_source: dict[tuple[bytes, bytes, bytes | None], set[int]] = defaultdict(set)
    for r in ours:
        batch = batches.get(_int(r.headers.get(BATCH)) or -1)
        if batch is not None and batch.kind in COVERING and SOURCE_OFFSET in r.headers:
            by_source[(r.headers[SOURCE_PARTITION], r.headers[SOURCE_OFFSET], r.headers.get(SOURCE_TOPIC))].add(
                batch.id)
    twice = [(t.decode() if t else "", int(p), int(o), sorted(ids)) for (p, o, t), ids in by_source.items()
             if len(ids) > 1]
    return [Anomaly("duplicate-output", f"source records published by two batches: {_some(twice)}")] if twice else []


def _regular_order(ours: list[Record], batches: dict[int, Batch]) -> list[Anomaly]:
    """The regular lane publishes its batches in commit order: along a partition their numbers never go back."""
    last: dict[int, tuple[int, int]] = {}
    back = []
    for r in sorted(ours, key=lambda r: (r.partition, r.offset)):
        batch = batches.get(_int(r.headers.get(BATCH)) or -1)
        number = _int(r.headers.get(COMMIT_SEQ))
        if batch is None or batch.kind != "regular" or number is None:
            continue
        if r.partition in last and number < last[r.partition][0]:
            back.append((r.partition, r.offset, number, last[r.partition][0]))
        last[r.partition] = max(last.get(r.partition, (number, r.offset)), (number, r.offset))
    return [Anomaly("commit-seq-regression", f"regular-lane output going back in commit order (partition, offset, "
                                             f"seq, after seq): {_some(back)}")] if back else []


# ---------------------------------------------------------------- the sink against the output

def _same(value: Any) -> Any:
    """A value both sides spell alike: numbers as Decimals, the rest as text."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float, Decimal)):
        try:
            return Decimal(repr(value) if isinstance(value, float) else value).normalize()
        except InvalidOperation:
            return str(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    text = str(value)
    try:
        return Decimal(text).normalize()
    except InvalidOperation:
        return text


def sink_vs_output(history: History, decode: Decode) -> list[Anomaly]:
    """The sink holds what its published output says, in commit order: per key the last record (replace; a
    tombstone deletes the key its record key carried), the deltas added up (accumulate), every row once
    (append). Skipped while a batch is unfinished or published nothing on purpose."""
    sink = history.sink
    assert sink is not None
    if any(b.state in ("planned", "staged", "committed") or (b.state == "published" and not b.publish)
           for b in history.batches):
        return []
    ours = sorted(_ours(history, history.output), key=lambda r: (_int(r.headers.get(COMMIT_SEQ)) or 0,
                                                                  _int(r.headers.get(SEQ)) or 0))
    rows = [(r, decode(r.value)) for r in ours if r.value is not None]
    published_columns = {c for _, row in rows for c in row}
    columns = sorted(published_columns & set(sink.rows[0])) if sink.rows else sorted(published_columns)

    def key_of(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(_same(row.get(k)) for k in sink.key)

    def shape(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(_same(row.get(c)) for c in columns)

    if sink.mode == "append":
        published, held = Counter(shape(row) for _, row in rows), Counter(shape(row) for row in sink.rows)
        more, fewer = held - published, published - held
        found = []
        if more:
            found.append(Anomaly("duplicate-effect", f"sink rows beyond the output's: {_some(more.items())}"))
        if fewer:
            found.append(Anomaly("sink-output", f"published rows missing from the sink: {_some(fewer.items())}"))
        return found
    expected: dict[tuple[Any, ...], dict[str, Any]] = {}
    keys: dict[bytes | None, tuple[Any, ...]] = {}
    for r in ours:
        if r.value is None:
            expected.pop(keys.get(r.key, ()), None)
            continue
        row = decode(r.value)
        key = keys[r.key] = key_of(row)
        if sink.mode == "accumulate":
            total = expected.setdefault(key, {k: row.get(k) for k in sink.key})
            for c in sink.accumulate:
                total[c] = _same(total.get(c) or 0) + _same(row.get(c) or 0)
        else:
            expected[key] = row
    stored = {key_of(row): row for row in sink.rows}
    compared = list(sink.accumulate) if sink.mode == "accumulate" else columns
    missing = [k for k in expected if k not in stored]
    unexpected = [k for k in stored if k not in expected]
    differ = [k for k in expected if k in stored
              and any(_same(stored[k].get(c)) != _same(expected[k].get(c)) for c in compared)]
    found = []
    if missing:
        found.append(Anomaly("sink-output", f"keys published but missing from the sink: {_some(missing)}"))
    if unexpected:
        found.append(Anomaly("sink-output", f"sink keys the output never published: {_some(unexpected)}"))
    if sink.mode == "accumulate":
        larger = [k for k in differ if all(_same(stored[k].get(c) or 0) >= _same(expected[k].get(c) or 0)
                                           for c in compared)]
        if larger:
            found.append(Anomaly("duplicate-effect", f"sink totals above the published deltas' sums: "
                                                     f"{_some(larger)}"))
        differ = [k for k in differ if k not in larger]
    if differ:
        k = sorted(differ, key=str)[0]
        found.append(Anomaly("sink-output", f"keys whose sink row is not the published one: {_some(differ)}; "
                                            f"e.g. {k}: sink {stored[k]}, output {expected[k]}"))
    return found


# ---------------------------------------------------------------- dead letters

def dead_letters(history: History) -> list[Anomaly]:
    """A dead letter belongs to a committed batch and is the only one of its source record among the batches that
    claim coverage (a redrive's are the redrive's own)."""
    batches = {b.id: b for b in history.batches}
    counted: dict[tuple[str, int, int, int], set[int]] = defaultdict(set)
    orphans = []
    for d in history.dead_letters:
        batch = batches.get(d.batch_id)
        if batch is None or batch.state not in FINISHED:
            orphans.append((d.batch_id, d.topic, d.partition, d.offset))
        elif batch.kind in COVERING:
            counted[(d.topic, d.partition, d.offset, d.incarnation)].add(d.batch_id)
    found = []
    twice = [(where, sorted(ids)) for where, ids in counted.items() if len(ids) > 1]
    if twice:
        found.append(Anomaly("duplicate-effect", f"input records dead-lettered by two batches: {_some(twice)}"))
    if orphans:
        found.append(Anomaly("unknown-batch", f"dead letters of batches not committed: {_some(orphans)}"))
    return found
