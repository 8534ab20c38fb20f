"""The `eosbatch` command: argument parsing and printing over eosbatch.commands, and the exit code of each
error kind (with a net for a client library's error that escaped the mapping at its boundary)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

from eosbatch import commands
from eosbatch.exceptions import EosbatchError, Fenced, TerminalError

# 1: `verify` found a violation; 2: terminal (retrying cannot help); 3: transient (retry);
# 4: fenced (another runner owns the pipeline or the batch now and finishes it; this one changed nothing).
EXIT_VIOLATION, EXIT_TERMINAL, EXIT_TRANSIENT, EXIT_FENCED = 1, 2, 3, 4


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eosbatch", description="Exactly-once batches of Kafka data.",
        epilog="exit codes: 0 done, 1 verify found a violation, 2 terminal error (retrying cannot help), "
               "3 transient error (retry), 4 fenced (another runner owns the pipeline or batch now)")
    sub = parser.add_subparsers(dest="command", required=True)
    stack_cmd = sub.add_parser("stack", help="the embedded local Kafka + PostgreSQL + Spark Connect server")
    stack_cmd.add_argument("action", choices=["up", "down", "status", "env"])
    stack_cmd.add_argument("--spark-cluster", action=argparse.BooleanOptionalAction, default=None,
                           help="up: also a Spark standalone master, two workers and a Connect server on them; "
                                "up and env: export that server as EOSBATCH_SPARK_REMOTE "
                                "(default: EOSBATCH_SPARK_CLUSTER)")
    db = sub.add_parser("db", help="the ledger schema (Alembic)")
    db.add_argument("action", choices=["upgrade", "downgrade", "current"])
    db.add_argument("revision", nargs="?", default=None)
    run = sub.add_parser("run", help="run batches of a pipeline")
    run.add_argument("pipeline")
    run.add_argument("--max-batches", type=int, default=None)
    run.add_argument("--until-caught-up", action="store_true", help="the default when --max-batches is absent")
    run.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=None,
                     help="process batch N+1 while N commits and N-1 publishes (default: EOSBATCH_OVERLAP)")
    status = sub.add_parser("status", help="batches, offsets and lag of a pipeline")
    status.add_argument("pipeline")
    status.add_argument("--json", action="store_true")
    backfill = sub.add_parser("backfill", help="process history: fill the holes in offset ranges, or reprocess",
                              description="Runs backfill batches over the holes of the requested ranges (fill), or "
                                          "re-runs their committed parts into an idempotent sink (reprocess).")
    backfill.add_argument("pipeline")
    backfill.add_argument("--range", dest="ranges", action="append", metavar="TOPIC:PARTITION:START-END",
                          help="an offset range, END exclusive; repeat for more")
    backfill.add_argument("--from", dest="time_from", metavar="TIME", help="ISO 8601 time (UTC unless zoned)")
    backfill.add_argument("--to", dest="time_to", metavar="TIME")
    backfill.add_argument("--mode", choices=["fill", "reprocess"], default="fill")
    backfill.add_argument("--publish", action=argparse.BooleanOptionalAction, default=None,
                          help="publish the output (default: yes for fill, no for reprocess)")
    backfill.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    replay = sub.add_parser("replay", help="replay a failed batch (or publish a committed one)")
    replay.add_argument("pipeline")
    replay.add_argument("batch_id", type=int)
    ranges = sub.add_parser("ranges", help="committed coverage per partition, and the holes")
    ranges.add_argument("pipeline")
    ranges.add_argument("--json", action="store_true")
    verify = sub.add_parser("verify", help="audit a pipeline from the outside: coverage, output, sink, dead letters",
                            description="Exit 0 when every check holds, 1 on a violation.")
    verify.add_argument("pipeline")
    verify.add_argument("--batch", type=int, metavar="N", dest="batch_id",
                        help="only the cheap check of batch N: ranges, dead letters, its output records")
    verify.add_argument("--no-recompute", action="store_true",
                        help="skip recomputing the sink from the committed input (the check that runs Spark)")
    publish = sub.add_parser("publish", help="settle a committed batch whose marker expired (the operator decides)")
    publish.add_argument("pipeline")
    publish.add_argument("batch_id", type=int)
    how = publish.add_mutually_exclusive_group(required=True)
    how.add_argument("--published", action="store_true",
                     help="its records are in the output topic (header eosbatch.batch): finalize, produce nothing")
    how.add_argument("--republish", action="store_true", help="they are not: publish the batch's outbox now")
    reset = sub.add_parser("reset", help="after a source change: move partitions or accept a recreated topic",
                           description="Recorded in the ledger: skipped offsets become declared gaps; a recreated "
                                       "topic (new topic ID) starts a new incarnation. Never done automatically.")
    reset.add_argument("pipeline")
    where = reset.add_mutually_exclusive_group(required=True)
    where.add_argument("--partition", dest="partitions", action="append", metavar="TOPIC:PARTITION",
                       help="a partition to move; repeat for more")
    where.add_argument("--topic", help="accept the topic's new topic ID (deleted and recreated)")
    reset.add_argument("--to", required=True, metavar="OFFSET|earliest|latest",
                       help="the new next offset (--topic: earliest or latest)")
    reset.add_argument("--reason", help="why, recorded with the reset")
    compact = sub.add_parser("compact", help="bound the ledger: merge old published batches' committed ranges")
    compact.add_argument("pipeline")
    compact.add_argument("--older-than-days", type=float, default=None,
                         help="published batches committed longer ago than this (default: "
                              "EOSBATCH_COMPACT_AFTER_DAYS, 7)")
    abort = sub.add_parser("abort", help="abort a pipeline's unfinished (uncommitted) batches")
    abort.add_argument("pipeline")
    abort.add_argument("batch_id", nargs="?", type=int)
    # ---- airflow: a local Airflow on the stack (eosbatch.orchestration.local)
    airflow_cmd = sub.add_parser("airflow", help="a local Airflow (API server, scheduler, DAG processor)")
    airflow_cmd.add_argument("action", choices=["up", "down", "status"])
    # ---- end airflow
    return parser


def _airflow(action: str) -> None:
    if action == "up":  # progress on stderr, the exports on stdout: eval "$(eosbatch airflow up)"
        info = commands.airflow_up(log=lambda line: print(line, file=sys.stderr))
        for key, value in {**commands.stack_env(), **info.exports()}.items():
            print(f"export {key}={shlex.quote(value)}")
        print(f"airflow: UI and API at {info.url}; DAGs start paused: airflow dags unpause <dag id>",
              file=sys.stderr)
    elif action == "down":
        commands.airflow_down()
    else:
        info = commands.airflow_status()
        print(f"home:   {info.home}")
        print(f"url:    {info.url}")
        for name, pid in info.pids.items():
            print(f"{name + ':':<15} pid={pid or 'stopped'}")
        print(f"health: {json.dumps(info.health) if info.health else 'no answer'}")


def _print_cluster(info: commands.StackInfo) -> None:
    cluster = info.spark_cluster
    assert cluster is not None
    alive = "no answer" if cluster.alive_workers is None else f"{cluster.alive_workers}/{len(cluster.worker_pids)}"
    print(f"cluster:  {cluster.master_url} pid={cluster.master_pid or 'stopped'} ui={cluster.web_ui} "
          f"workers alive={alive}")
    for i, pid in enumerate(cluster.worker_pids, start=1):
        print(f"  worker-{i}: pid={pid or 'stopped'}")
    print(f"  connect:  {info.spark_cluster_remote} pid={info.spark_cluster_connect_pid or 'stopped'} "
          f"(Spark Connect, master {cluster.master_url})")


def _print_status(report: dict) -> None:  # type: ignore[type-arg]
    print(f"pipeline {report['pipeline']}")
    print(f"  {'partition':<24} {'next':>10} {'LSO':>10} {'lag':>8}")
    for p in report["partitions"]:
        print(f"  {p['partition']:<24} {str(p['next_offset']):>10} {p['last_stable_offset']:>10} {str(p['lag']):>8}")
    for problem in report.get("source_problems", []):
        print(f"  STOPPED: {problem}")
    for r in report.get("resets", []):
        print(f"  reset {r['id']} at {r['at']}: {r['reset']} ({r['reason']})")
    print(f"  {'batch':>6} {'kind':<9} {'state':<10} {'read':>8} {'sink':>8} {'dead':>6} {'out':>8}  ranges")
    for b in report["batches"]:
        print(f"  {b['id']:>6} {b['kind']:<9} {b['state']:<10} {str(b['records_read']):>8} {str(b['sink_rows']):>8} "
              f"{str(b['dead_letters']):>6} {str(b['published']):>8}  {' '.join(b['ranges'])}")
        if b["error"]:
            print(f"         error: {b['error']}")


def _print_ranges(report: list) -> None:  # type: ignore[type-arg]
    def show(found: tuple) -> str:  # type: ignore[type-arg]
        return " ".join(f"{r.start}-{r.end}" for r in found) or "-"

    for p in report:
        print(f"{p.partition}  log {p.log_start}-{p.last_stable}  next {p.next_offset}")
        print(f"  committed  {show(p.committed)}")
        print(f"  holes      {show(p.holes)}")
        if p.declared:
            print(f"  declared   {show(p.declared)}  (skipped by a reset, see eosbatch status)")
        if p.in_flight:
            print(f"  in flight  {show(p.in_flight)}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # pipeline modules import from the current folder, as with `python -m`
    try:
        if args.command == "stack":
            if args.action == "up":
                # Progress on stderr: stdout carries only the exports, for `eval "$(eosbatch stack up)"`.
                info = commands.stack_up(log=lambda line: print(line, file=sys.stderr),
                                         spark_cluster=args.spark_cluster)
                for key, value in info.env().items():
                    print(f"export {key}={shlex.quote(value)}")
            elif args.action == "down":
                commands.stack_down()
            elif args.action == "env":
                for key, value in commands.stack_env(args.spark_cluster).items():
                    print(f"export {key}={shlex.quote(value)}")
            else:
                info = commands.stack_status(args.spark_cluster)
                print(f"home:     {info.home}")
                print(f"kafka:    {info.kafka_bootstrap} pid={info.kafka_pid or 'stopped'} "
                      f"version={info.versions['kafka']}")
                print(f"postgres: {info.database_url} pid={info.postgres_pid or 'stopped'} "
                      f"version={info.versions['postgres']}")
                print(f"spark:    {info.spark_remote} pid={info.spark_connect_pid or 'stopped'} "
                      f"supervisor={info.spark_connect_supervisor_pid or 'none'} "
                      f"(Spark Connect, pyspark {info.versions['pyspark']})")
                if info.spark_cluster is not None:
                    _print_cluster(info)
        elif args.command == "db":
            if args.action == "upgrade":
                print(f"ledger at revision {commands.db_upgrade(args.revision or 'head')}")
            elif args.action == "downgrade":
                print(f"ledger at revision {commands.db_downgrade(args.revision or 'base')}")
            else:
                print(commands.db_current())
        elif args.command == "run":
            summary = commands.run(args.pipeline, args.max_batches, overlap=args.overlap)
            print(f"{summary.batches} batches: {summary.records_read} records read, {summary.sink_rows} sink rows, "
                  f"{summary.dead_letters} dead letters, {summary.published} records published")
        elif args.command == "status":
            report = commands.status(args.pipeline)
            print(json.dumps(report, indent=2)) if args.json else _print_status(report)
        elif args.command == "backfill":
            from eosbatch.backfill import describe
            from eosbatch.progress import Progress

            bar = Progress(0)
            backfilled = commands.backfill(args.pipeline, args.ranges, args.time_from, args.time_to, args.mode,
                                       args.publish, args.dry_run, log=bar.log, progress=bar)
            if args.dry_run:
                print("dry run: nothing changed")
                for line in describe(backfilled.plan):
                    print(line)
            else:
                print(f"{backfilled.batches} batches: {backfilled.records} records read, {backfilled.sink_rows} sink "
                      f"rows, {backfilled.dead_letters} dead letters, {backfilled.published} records published")
        elif args.command == "replay":
            outcome = commands.replay(args.pipeline, args.batch_id, log=print)
            print(f"{outcome.action}" + (f": batch(es) {', '.join(map(str, outcome.batches))}"
                                         if outcome.batches else ""))
        elif args.command == "ranges":
            coverage = commands.ranges(args.pipeline)
            if args.json:
                print(json.dumps([{"partition": str(p.partition), "log_start": p.log_start,
                                   "last_stable_offset": p.last_stable, "next_offset": p.next_offset,
                                   "committed": [str(r) for r in p.committed], "holes": [str(r) for r in p.holes],
                                   "in_flight": [str(r) for r in p.in_flight], "incarnation": p.incarnation,
                                   "declared": [str(r) for r in p.declared]} for p in coverage], indent=2))
            else:
                _print_ranges(coverage)
        elif args.command == "airflow":
            _airflow(args.action)
        elif args.command == "verify":
            audit = commands.verify(args.pipeline, recompute=not args.no_recompute,
                                    log=lambda line: print(line, file=sys.stderr), batch_id=args.batch_id)
            for finding in audit.findings:
                print(finding.line())
            print(f"{audit.pipeline}: {'exactly-once holds' if audit.ok else 'VIOLATION'}")
            return 0 if audit.ok else EXIT_VIOLATION
        elif args.command == "publish":
            settled = commands.settle_publish(args.pipeline, args.batch_id, republish=args.republish, log=print)
            print(f"batch {settled.id}: {settled.state}")
        elif args.command == "reset":
            moved = commands.reset(args.pipeline, args.partitions, args.topic, args.to, args.reason, log=print)
            print(f"{len(moved)} partition(s) reset")
        elif args.command == "compact":
            done = commands.compact(args.pipeline, args.older_than_days)
            print(f"{args.pipeline}: {done.batches} published batches compacted; committed ranges "
                  f"{done.committed_before} -> {done.committed_after} rows, {done.batch_ranges_deleted} batch "
                  "ranges deleted")
        elif args.command == "abort":
            aborted = commands.abort(args.pipeline, args.batch_id, log=print)
            print(f"aborted {len(aborted)} batch(es)")
    except EosbatchError as exc:
        return _fail(exc)
    except Exception as exc:
        mapped = _third_party(exc)
        if mapped is None:
            raise  # a bug: its traceback is the useful output
        return _fail(mapped)
    return 0


def _fail(exc: EosbatchError) -> int:
    """One line on stderr, no traceback, and the exit code of the error's kind."""
    message = " ".join(str(exc).split())  # one line, whatever a driver's message holds
    if isinstance(exc, Fenced):
        print(f"eosbatch: fenced: {message}", file=sys.stderr)
        return EXIT_FENCED
    print(f"eosbatch: {type(exc).__name__}: {message}", file=sys.stderr)
    return EXIT_TERMINAL if isinstance(exc, TerminalError) else EXIT_TRANSIENT


def _third_party(exc: Exception) -> EosbatchError | None:
    """A client library's error that escaped eosbatch's own mapping (eosbatch.kafka, eosbatch.ledger map at
    the boundary; this is the net under it), as the same mapping would name it."""
    import psycopg2
    from confluent_kafka import KafkaException
    from sqlalchemy.exc import DBAPIError

    from eosbatch import config
    from eosbatch.kafka import errors as kafka_errors
    from eosbatch.ledger import errors as ledger_errors

    if isinstance(exc, KafkaException):
        return kafka_errors.to_eosbatch(exc, "a request", os.environ.get(config.KAFKA_BOOTSTRAP, "?"))
    if isinstance(exc, DBAPIError) and isinstance(exc.orig, psycopg2.Error):
        exc = exc.orig
    if isinstance(exc, psycopg2.Error):
        where = config.redact(os.environ.get(config.DATABASE_URL, "?"))
        return ledger_errors.to_eosbatch(exc, where) or TerminalError(
            f"PostgreSQL at {where}: {ledger_errors.first_line(exc)}")
    return None


if __name__ == "__main__":
    sys.exit(main())
