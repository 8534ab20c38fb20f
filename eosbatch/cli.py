"""The `eosbatch` command: printing over eosbatch.commands (the arguments are eosbatch.cli_parser's), asking
before a destructive command, and the exit code of each error kind (with a net for a client library's error
that escaped the mapping at its boundary)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

from eosbatch import cli_dead_letters, cli_parser, cli_stack, cli_status, commands, confirm
from eosbatch.cli_parser import EXIT_FENCED, EXIT_TERMINAL, EXIT_TRANSIENT, EXIT_USAGE, EXIT_VIOLATION
from eosbatch.exceptions import ConfigError, EosbatchError, Fenced, TerminalError

__all__ = ["EXIT_FENCED", "EXIT_TERMINAL", "EXIT_TRANSIENT", "EXIT_USAGE", "EXIT_VIOLATION", "main"]

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
    args = cli_parser.parser().parse_args(argv)
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # pipeline modules import from the current folder, as with `python -m`
    try:
        return _command(args)
    except EosbatchError as exc:
        return _fail(exc)
    except Exception as exc:
        mapped = _third_party(exc)
        if mapped is None:
            raise  # a bug: its traceback is the useful output
        return _fail(mapped)


def _command(args: argparse.Namespace) -> int:
    """Run the parsed command; its exit code."""
    as_json = getattr(args, "json", False)
    log = _to_stderr if as_json else print  # with --json, stdout holds the one JSON document only
    if args.command == "stack":
        cli_stack.stack(args)
    elif args.command == "db":
        return _db(args)
    elif args.command == "run":
        summary = commands.run(args.pipeline, args.max_batches, log=log, overlap=args.overlap)
        if as_json:
            _print_json({"pipeline": args.pipeline, **summary._asdict()})
        else:
            print(f"{summary.batches} batches: {summary.records_read} records read, {summary.sink_rows} sink rows, "
                  f"{summary.dead_letters} dead letters, {summary.published} records published")
    elif args.command == "status" and args.pipeline is None:
        every = commands.status_all()
        _print_json(every) if as_json else cli_status.print_every(every)
    elif args.command == "status":
        report = commands.status(args.pipeline)
        _print_json(report) if as_json else cli_status.print_one(report)
    elif args.command == "backfill":
        _backfill(args)
    elif args.command == "dead-letters":
        return cli_dead_letters.redrive(args, _interactive(), _refusal, _refuse)
    elif args.command == "replay":
        outcome = commands.replay(args.pipeline, args.batch_id, log=log)
        if as_json:
            _print_json({"pipeline": args.pipeline, "batch_id": args.batch_id, "action": outcome.action,
                         "message": outcome.message, "batches": list(outcome.batches)})
        else:
            print(f"{outcome.action}" + (f": batch(es) {', '.join(map(str, outcome.batches))}"
                                         if outcome.batches else ""))
    elif args.command == "adopt-published":
        return _adopt_published(args)
    elif args.command == "ranges":
        coverage = commands.ranges(args.pipeline)
        if as_json:
            _print_json([{"partition": str(p.partition), "log_start": p.log_start,
                          "last_stable_offset": p.last_stable, "next_offset": p.next_offset,
                          "committed": [str(r) for r in p.committed], "holes": [str(r) for r in p.holes],
                          "in_flight": [str(r) for r in p.in_flight], "incarnation": p.incarnation,
                          "declared": [str(r) for r in p.declared]} for p in coverage])
        else:
            _print_ranges(coverage)
    elif args.command == "airflow":
        _airflow(args.action)
    elif args.command in ("topic", "produce", "pipelines", "check"):
        return _user_tools(args)
    elif args.command == "warm-up":
        rounds = commands.warm_up(args.records, args.rounds, log=log)
        print(f"warmed up: {len(rounds)} round(s), the last {rounds[-1].seconds:.1f}s")
    elif args.command == "verify":
        audit = commands.verify(args.pipeline, recompute=not args.no_recompute, log=_to_stderr,
                                batch_id=args.batch_id)
        if as_json:
            _print_json({"pipeline": audit.pipeline, "ok": audit.ok,
                         "findings": [f._asdict() for f in audit.findings]})
        else:
            for finding in audit.findings:
                print(finding.line())
            print(f"{audit.pipeline}: {'exactly-once holds' if audit.ok else 'VIOLATION'}")
        return 0 if audit.ok else EXIT_VIOLATION
    elif args.command == "publish":
        settled = commands.settle_publish(args.pipeline, args.batch_id, republish=args.republish, log=print)
        print(f"batch {settled.id}: {settled.state}")
    elif args.command == "reset":
        return _reset(args)
    elif args.command == "compact":
        done = commands.compact(args.pipeline, args.older_than_days)
        print(f"{args.pipeline}: {done.batches} published batches compacted; committed ranges "
              f"{done.committed_before} -> {done.committed_after} rows, {done.batch_ranges_deleted} batch "
              "ranges deleted")
    elif args.command == "abort":
        aborted = commands.abort(args.pipeline, args.batch_id, log=print, dry_run=args.dry_run)
        print(f"dry run: nothing changed; {len(aborted)} batch(es) would be aborted" if args.dry_run
              else f"aborted {len(aborted)} batch(es)")
    return 0


def _user_tools(args: argparse.Namespace) -> int:
    if args.command == "topic":
        made = commands.topic_create(args.name, args.partitions, args.replication_factor)
        print(f"topic {made.name}: {'created' if made.created else 'exists already'} with {made.partitions} "
              "partition(s)")
    elif args.command == "produce":
        committed = _produce(args)
        print(f"{committed} record(s) committed to {args.topic}")
    elif args.command == "pipelines":
        found = commands.pipelines()
        _print_json(found) if args.json else _print_pipelines(found)
    else:
        checks = commands.check(args.pipeline)
        ok = all(c.ok for c in checks)
        if args.json:
            _print_json({"pipeline": args.pipeline, "ok": ok, "checks": [c._asdict() for c in checks]})
        else:
            for c in checks:
                print(c.line())
            print(f"{args.pipeline}: {'ready' if ok else 'NOT READY'}")
        return 0 if ok else EXIT_VIOLATION
    return 0


def _print_pipelines(found: list) -> None:  # type: ignore[type-arg]
    if not found:
        print("no pipelines registered (set EOSBATCH_PIPELINES to your pipeline modules)", file=sys.stderr)
    for p in found:
        output = f" -> {p['output_topic']}" if p["output_topic"] else ""
        print(f"{p['name']}: {', '.join(p['source_topics'])} -> {p['sink']['table']} ({p['sink']['mode']}, "
              f"key {', '.join(p['sink']['key'])}){output}")


def _produce(args: argparse.Namespace) -> int:
    if args.file == "-":
        return commands.produce(args.topic, sys.stdin, args.key_field, args.per_transaction, args.transactional_id)
    try:
        with open(args.file, encoding="utf-8") as lines:
            return commands.produce(args.topic, lines, args.key_field, args.per_transaction,
                                    args.transactional_id)
    except OSError as exc:
        raise ConfigError("FILE", f"cannot read {args.file}: {exc.strerror}") from None


def _db(args: argparse.Namespace) -> int:
    if args.action == "upgrade":
        print(f"ledger at revision {commands.db_upgrade(args.revision)}")
    elif args.action == "downgrade":
        deletes = commands.db_downgrade_deletes(args.revision)
        if deletes is not None:
            why = _refusal(f"downgrading the ledger to base deletes {deletes}", args.yes)
            if why is not None:
                return _refuse(why)
        print(f"ledger at revision {commands.db_downgrade(args.revision)}")
    elif args.action == "psql":
        argv, env = commands.db_psql(args.sql, args.file)
        sys.stdout.flush()
        os.execvpe(argv[0], argv, {**os.environ, **env})  # noqa: S606 - psql, found on PATH as a user runs it
    else:
        print(commands.db_current())
    return 0


def _backfill(args: argparse.Namespace) -> None:
    from eosbatch.backfill import describe
    from eosbatch.progress import Progress

    bar = Progress(0)
    backfilled = commands.backfill(args.pipeline, args.ranges, args.time_from, args.time_to, args.mode,
                                   args.publish, args.dry_run, log=_to_stderr if args.json else bar.log,
                                   progress=bar)
    if args.json:
        plan = backfilled.plan
        _print_json({"pipeline": args.pipeline, "dry_run": backfilled.dry_run, "mode": plan.mode,
                     "plan": {"requested": [str(r) for r in plan.requested],
                              "skipped": [str(r) for r in plan.skipped],
                              "in_flight": [str(r) for r in plan.in_flight],
                              "regular": [str(r) for r in plan.regular],
                              "batches": [[str(r) for r in batch] for batch in plan.batches],
                              "offsets": plan.offsets},
                     **({} if backfilled.dry_run else
                        {"batches": backfilled.batches, "records_read": backfilled.records,
                         "sink_rows": backfilled.sink_rows, "dead_letters": backfilled.dead_letters,
                         "published": backfilled.published})})
    elif args.dry_run:
        print("dry run: nothing changed")
        for line in describe(backfilled.plan):
            print(line)
    else:
        print(f"{backfilled.batches} batches: {backfilled.records} records read, {backfilled.sink_rows} sink "
              f"rows, {backfilled.dead_letters} dead letters, {backfilled.published} records published")


def _reset(args: argparse.Namespace) -> int:
    """A dry run prints the moves. A real one asks first (on a terminal: after printing the moves a dry run
    finds), unless --yes."""
    def moves(dry_run: bool) -> list:  # type: ignore[type-arg]
        return commands.reset(args.pipeline, args.partitions, args.topic, args.to, args.reason, log=print,
                              dry_run=dry_run)

    if args.dry_run:
        print(f"dry run: nothing changed; {len(moves(True))} partition(s) would be reset")
        return 0
    if not args.yes:
        where = ", ".join(args.partitions) if args.partitions else f"topic {args.topic}"
        consequence = (f"reset of pipeline {args.pipeline} moves {where} to {args.to}: the offsets it skips are "
                       "never read, and its unfinished batches are aborted first")
        if _interactive():
            planned = moves(True)
            consequence += f" ({'; '.join(map(str, planned)) or 'no partition moves'})"
        why = _refusal(consequence, yes=False)
        if why is not None:
            return _refuse(why)
    print(f"{len(moves(False))} partition(s) reset")
    return 0


def _adopt_published(args: argparse.Namespace) -> int:
    lost = commands.lost_output(args.pipeline)
    if not lost:
        print(f"pipeline {args.pipeline}: the ledger is not behind the output; nothing to adopt")
        return 0
    ranges = ", ".join(f"{r.topic}:{r.partition} [{r.start}, {r.end})" for r in lost)
    why = _refusal(f"adopt-published processes {ranges} of pipeline {args.pipeline} into the sink and records it "
                   "as published, producing nothing: its output is taken to be the records already in the topic",
                   yes=args.yes)
    if why is not None:
        return _refuse(why)
    batch = commands.adopt_published(args.pipeline)
    print(f"batch {batch.id if batch else '-'}: adopted {ranges}")
    return 0


def _interactive() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def _refusal(consequence: str, yes: bool) -> str | None:
    return confirm.refusal(consequence, yes, _interactive(), input)


def _refuse(why: str) -> int:
    print(f"eosbatch: not done: {why}", file=sys.stderr)
    return EXIT_USAGE


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _print_json(document: object) -> None:
    print(json.dumps(document, indent=2))


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
