"""Two checks of `eosbatch verify` on the commit order (issue 37): the commit sequence has no hole and never goes
back, and each published batch's records came from one Kafka transaction (their eosbatch.attempt header), with
their batch's number. The decisions are pure; `eosbatch.verify` reads what they take."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping

from eosbatch.config import Settings
from eosbatch.kafka import record
from eosbatch.kafka.read_back import Record
from eosbatch.ledger import audit, store


def sequence_problems(numbered: list[tuple[int, str, int]], counter: int) -> list[str]:
    """What is wrong with the numbers of the committed batches ((id, kind, commit_seq), oldest id first) and the
    pipeline's counter: a number held twice, a hole from the first to the last, a counter that is not the last,
    a later batch of a lane holding a lower number."""
    seqs = Counter(seq for _, _, seq in numbered)
    problems = []
    if twice := sorted(s for s, n in seqs.items() if n > 1):
        problems.append(f"numbers held by more than one batch: {twice[:5]}")
    if seqs:
        first, last = min(seqs), max(seqs)
        if missing := sorted(set(range(first, last + 1)) - set(seqs)):
            problems.append(f"numbers no committed batch holds: {missing[:5]}")
        if counter != last:
            problems.append(f"the pipeline's counter is {counter}, the last committed batch holds {last}")
    lanes: dict[bool, list[tuple[int, int]]] = defaultdict(list)
    for batch_id, kind, seq in numbered:
        lanes[kind == "regular"].append((batch_id, seq))
    for held in lanes.values():
        back = [(a, b) for (a, sa), (b, sb) in zip(held, held[1:], strict=False) if sb < sa]
        if back:
            problems.append(f"a later batch committed with a lower number: {back[:5]}")
    return problems


def attempt_problems(records: Iterable[Record], numbers: Mapping[str, int]) -> list[str]:
    """What is wrong with the read_committed records of ours: a batch's records from more than one Kafka
    transaction (a batch is published in one; another attempt's records are an aborted or torn one's), or a
    record whose commit_seq header is not its batch's number in the ledger (`numbers`, by batch id as text)."""
    attempts: dict[str, set[bytes | None]] = defaultdict(set)
    renumbered: set[str] = set()
    for r in records:
        batch = record.batch_of(r.headers)
        attempts[batch].add(r.headers.get(record.ATTEMPT))
        if batch in numbers and record.commit_order(r.headers)[0] != numbers[batch]:
            renumbered.add(batch)
    problems = []
    if mixed := sorted(b for b, found in attempts.items() if len(found) > 1):
        problems.append(f"batches whose records came from more than one Kafka transaction: {mixed[:5]}")
    if renumbered:
        problems.append(f"batches whose records' commit_seq is not the ledger's: {sorted(renumbered)[:5]}")
    return problems


def commit_order(settings: Settings, pipeline: str, records: list[Record] | None) -> tuple[bool, str]:
    """(ok, detail) of the commit sequence, and with `records` (ours, read_committed) of their attempts."""
    with store.transaction(settings) as cur:
        numbered, counter = audit.commit_numbers(cur, pipeline)
    problems = sequence_problems(numbered, counter)
    if records is not None:
        problems += attempt_problems(records, {str(i): seq for i, _, seq in numbered})
    if problems:
        return False, "; ".join(problems)
    return True, f"{len(numbered)} committed batches numbered 1 by 1 up to {counter}" + \
        (", each published in one Kafka transaction" if records is not None else "")
