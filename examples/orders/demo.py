"""The end-to-end demo: generate orders (with aborted transactions, repeated ids and malformed records) and
customers (Avro in the Confluent wire format, keyed, with deletes), run the three demo pipelines until caught
up, and check exactly-once from the outside.

    python -m examples.orders.demo [--records N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from decimal import Decimal

from eosbatch import config, registry, running, stack
from eosbatch.context import Context
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import migrate, store
from eosbatch.verify import audit, check_output, coverage_gaps
from examples.customers import generate as customers
from examples.orders import generate

PIPELINES = "examples.orders.pipeline,examples.customers.pipeline"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=20_000)
    args = parser.parse_args()
    os.environ.setdefault(config.PIPELINES, PIPELINES)
    if not (os.environ.get(config.DATABASE_URL) and os.environ.get(config.KAFKA_BOOTSTRAP)):
        os.environ.update(stack.up().env())
    settings = config.load()
    migrate.upgrade(settings.database_url)
    generate.ensure_topics(settings, generate.EXAMPLE_TOPICS)
    started = time.monotonic()
    produced = generate.generate(settings, records=args.records, seed=int(time.time()))
    print(f"generated {args.records} records: {len(produced.committed)} valid orders, {produced.malformed} "
          f"malformed, {produced.aborted} in aborted transactions ({time.monotonic() - started:.1f}s)")
    customers.generate(settings, records=max(args.records // 10, 600), seed=int(time.time()))
    for name in ("order_totals", "orders_latest", "customers_latest"):
        started = time.monotonic()
        ctx = Context(settings, registry.get(name), lambda line, name=name: print(f"[{name}] {line}"))
        summary = running.run(ctx)
        print(f"[{name}] {summary.batches} batches, {summary.records_read} records read in "
              f"{time.monotonic() - started:.1f}s")
    return 0 if check(settings) else 1


def check(settings: config.Settings) -> bool:
    """Input vs sink vs output vs dead letters, for the whole history of the demo topics."""
    inputs = read_topic(settings, "orders")
    aborted_visible = len(read_topic(settings, "orders", "read_uncommitted")) - len(inputs)
    orders, malformed = generate.valid_orders(inputs)
    want_totals = generate.expected_totals(orders)
    want_latest = {k: v["amount"] for k, v in generate.expected_latest(orders).items()}
    with store.transaction(settings) as cur:
        cur.execute("SELECT customer_id, total_amount, order_count FROM public.customer_totals")
        got_totals = {c: (Decimal(t), n) for c, t, n in cur.fetchall()}
        cur.execute("SELECT order_id, amount FROM public.orders_latest")
        got_latest = dict(cur.fetchall())
        cur.execute("SELECT pipeline, count(*) FROM eosbatch.dead_letters GROUP BY pipeline")
        dead = dict(cur.fetchall())
    results = []

    def line(label: str, ok: bool, detail: str) -> None:
        results.append(ok)
        print(f"  {'ok ' if ok else 'BAD'}  {label:<44} {detail}")

    print("\nexactly-once check")
    print(f"  input: {len(inputs)} committed records (+ {aborted_visible} in aborted transactions), "
          f"{len(orders)} valid orders, {malformed} malformed")
    line("order_totals: sink == sum over committed input", got_totals == want_totals,
         f"{len(got_totals)} customers, {sum(n for _, n in got_totals.values())} orders counted")
    line("orders_latest: sink == last version of each order", got_latest == want_latest,
         f"{len(got_latest)} orders")
    line("nothing from aborted transactions in the sinks",
         not any(k.startswith("ghost") for k in got_totals), "no ghost-* customers")
    for name in ("order_totals", "orders_latest"):
        line(f"{name}: dead letters == malformed input", dead.get(name, 0) == malformed,
             f"{dead.get(name, 0)} dead letters")
        line(f"{name}: every offset committed once", not coverage_gaps(settings, name), "no holes, no overlaps")
    for name, topic in (("order_totals", "customer_totals"), ("orders_latest", "orders_latest")):
        out = check_output(settings, name, topic)
        line(f"{name}: output exactly once (read_committed)", out.ok,
             f"{out.records} records, {len(out.duplicates)} duplicates")
    totals_out = read_topic(settings, "customer_totals")
    summed: dict[str, Decimal] = {}
    for record in totals_out:
        row = json.loads(record.value)
        summed[row["customer_id"]] = summed.get(row["customer_id"], Decimal(0)) + Decimal(str(row["total_amount"]))
    line("customer_totals topic sums to the sink", summed == {k: v[0] for k, v in got_totals.items()},
         f"{len(totals_out)} delta records")
    check_customers(settings, line)
    for name in ("order_totals", "orders_latest", "customers_latest"):  # `eosbatch verify`: the audit a user runs
        report = audit(Context(settings, registry.get(name)))
        line(f"{name}: eosbatch verify", report.ok,
             "; ".join(f"{f.check}: {f.detail}" for f in report.violations) or
             f"{sum(f.ok is True for f in report.findings)} checks hold, sink recomputed with Spark")
    print("exactly-once: " + ("PASS" if all(results) else "FAIL"))
    return all(results)


def check_customers(settings: config.Settings, line: Callable[[str, bool, str], None]) -> None:
    """The Avro pipeline with keys and deletes: the sink holds each customer's last state (deleted ones absent),
    the output's last record per key says the same (a tombstone for a deleted customer that was published),
    and the records that cannot be decoded are its dead letters."""
    want, dead = customers.expected(read_topic(settings, "customers"))
    with store.transaction(settings) as cur:
        cur.execute("SELECT customer_id, name, email, tier FROM public.customers")
        got = {c: {"name": n, "email": e, "tier": t} for c, n, e, t in cur.fetchall()}
        cur.execute("SELECT count(*) FROM eosbatch.dead_letters WHERE pipeline = 'customers_latest'")
        got_dead = cur.fetchone()[0]
    line("customers_latest: sink == last state of each customer", got == want,
         f"{len(got)} customers, deletes applied")
    line("customers_latest: dead letters == undecodable input", got_dead == dead, f"{got_dead} dead letters")
    line("customers_latest: every offset committed once", not coverage_gaps(settings, "customers_latest"),
         "no holes, no overlaps")
    out = check_output(settings, "customers_latest", "customers_latest")
    line("customers_latest: output exactly once (read_committed)", out.ok,
         f"{out.records} records, {len(out.duplicates)} duplicates")
    last: dict[str, dict | None] = {}
    for record in sorted(read_topic(settings, "customers_latest"),
                         key=lambda r: int(r.headers.get("eosbatch.commit_seq", b"0"))):
        last[record.key.decode()] = None if record.value is None else json.loads(record.value)
    published = {k: {f: v[f] for f in ("name", "email", "tier")} for k, v in last.items() if v is not None}
    line("customers_latest: the output's last record per key == the sink", published == want,
         f"{sum(v is None for v in last.values())} keys end in a tombstone")


if __name__ == "__main__":
    sys.exit(main())
