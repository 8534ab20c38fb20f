"""The `eosbatch` command's arguments: one parser per command and per action, each with its own help, and the
exit codes. A usage error exits with the terminal code: running the same command again cannot help."""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from typing import NoReturn

# 1: `verify` found a violation (or a `check` failed); 2: terminal (retrying cannot help); 3: transient (retry);
# 4: fenced (another runner owns the pipeline or the batch now and finishes it; this one changed nothing).
EXIT_VIOLATION, EXIT_TERMINAL, EXIT_TRANSIENT, EXIT_FENCED = 1, 2, 3, 4
# A usage error (bad arguments, a destructive command not confirmed) is terminal: Airflow must not retry it.
EXIT_USAGE = EXIT_TERMINAL

EXIT_CODES = ("exit codes: 0 done, 1 verify found a violation or a check failed, 2 terminal error or usage error "
              "(retrying cannot help), 3 transient error (retry), 4 fenced (another runner owns the pipeline or "
              "batch now)")


class Parser(argparse.ArgumentParser):
    """argparse's parser, exiting with EXIT_USAGE on a usage error (argparse's own 2, said on purpose)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def version() -> str:
    """The installed distribution's version."""
    try:
        return metadata.version("eosbatch")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def parser() -> Parser:
    top = Parser(prog="eosbatch", description="Exactly-once batches of Kafka data.", epilog=EXIT_CODES)
    top.add_argument("--version", action="version", version=f"eosbatch {version()}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _stack(sub)
    _db(sub)
    run = sub.add_parser("run", help="run batches of a pipeline", description="Run batches of a pipeline.")
    run.add_argument("pipeline")
    run.add_argument("--max-batches", type=int, default=None)
    run.add_argument("--until-caught-up", action="store_true", help="the default when --max-batches is absent")
    run.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=None,
                     help="process batch N+1 while N commits and N-1 publishes (default: EOSBATCH_OVERLAP)")
    _json(run)
    status = sub.add_parser("status", help="every pipeline's lag, last batch and blocked lanes; or one in detail",
                            description="Without PIPELINE: every registered pipeline (EOSBATCH_PIPELINES) at once: "
                                        "its lag, its last batch, and its blocked or failing lanes with their errors. "
                                        "With PIPELINE: its recent batches, per partition next offset and lag, "
                                        "source changes, resets and lanes.")
    status.add_argument("pipeline", nargs="?", help="one pipeline in detail (default: every pipeline)")
    _json(status)
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
    _json(backfill)
    replay = sub.add_parser("replay", help="replay a failed batch (or publish a committed one)",
                            description="Replay an aborted batch whose ranges are uncovered, publish a committed "
                                        "one, or say why not.")
    replay.add_argument("pipeline")
    replay.add_argument("batch_id", type=int)
    _json(replay)
    _dead_letters(sub)
    ranges = sub.add_parser("ranges", help="committed coverage per partition, and the holes",
                            description="Committed coverage per partition, the holes, declared gaps, in flight.")
    ranges.add_argument("pipeline")
    _json(ranges)
    verify = sub.add_parser("verify", help="audit a pipeline from the outside: coverage, output, sink, dead letters",
                            description="Exit 0 when every check holds, 1 on a violation.")
    verify.add_argument("pipeline")
    verify.add_argument("--batch", type=int, metavar="N", dest="batch_id",
                        help="only the cheap check of batch N: ranges, dead letters, its output records")
    verify.add_argument("--no-recompute", action="store_true",
                        help="skip recomputing the sink from the committed input (the check that runs Spark)")
    _json(verify)
    publish = sub.add_parser("publish", help="settle a committed batch whose marker expired (the operator decides)",
                             description="Settle a committed batch whose marker expired.")
    publish.add_argument("pipeline")
    publish.add_argument("batch_id", type=int)
    how = publish.add_mutually_exclusive_group(required=True)
    how.add_argument("--published", action="store_true",
                     help="its records are in the output topic (header eosbatch.batch): finalize, produce nothing")
    how.add_argument("--republish", action="store_true", help="they are not: publish the batch's outbox now")
    adopt = sub.add_parser("adopt-published",
                           help="after a lossy database failover: take the range the output holds back into the "
                                "ledger and the sink, producing nothing",
                           description="When the ledger is behind the output (a `run` stopped with `the ledger is "
                                       "behind the output`): process the lost range into the sink again and record "
                                       "it in the ledger as published, without producing it again. Asks first, on "
                                       "a terminal; elsewhere give --yes.")
    adopt.add_argument("pipeline")
    _yes(adopt)
    reset = sub.add_parser("reset", help="after a source change: move partitions or accept a recreated topic",
                           description="Recorded in the ledger: skipped offsets become declared gaps; a recreated "
                                       "topic (new topic ID) starts a new incarnation. Never done automatically. "
                                       "Asks first, on a terminal; elsewhere give --yes.")
    reset.add_argument("pipeline")
    where = reset.add_mutually_exclusive_group(required=True)
    where.add_argument("--partition", dest="partitions", action="append", metavar="TOPIC:PARTITION",
                       help="a partition to move; repeat for more")
    where.add_argument("--topic", help="accept the topic's new topic ID (deleted and recreated)")
    reset.add_argument("--to", required=True, metavar="OFFSET|earliest|latest",
                       help="the new next offset (--topic: earliest or latest)")
    reset.add_argument("--reason", help="why, recorded with the reset")
    _dry_run(reset, "print the offsets that would move and the batches recovery would settle; change nothing")
    _yes(reset)
    compact = sub.add_parser("compact", help="bound the ledger: merge old published batches' committed ranges",
                             description="Merge old published batches' committed ranges; drop their range detail.")
    compact.add_argument("pipeline")
    compact.add_argument("--older-than-days", type=float, default=None,
                         help="published batches committed longer ago than this (default: "
                              "EOSBATCH_COMPACT_AFTER_DAYS, 7)")
    abort = sub.add_parser("abort", help="abort a pipeline's unfinished (uncommitted) batches",
                           description="Abort the batch, or every unfinished batch; a committed one never.")
    abort.add_argument("pipeline")
    abort.add_argument("batch_id", nargs="?", type=int)
    _dry_run(abort, "print the batches that would be aborted; change nothing")
    _user_tools(sub)
    # ---- airflow: a local Airflow on the stack (eosbatch.orchestration.local)
    airflow_cmd = sub.add_parser("airflow", help="a local Airflow (API server, scheduler, DAG processor, triggerer)",
                                 description="A local Airflow on the stack.")
    actions = airflow_cmd.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("up", help="start it; prints the exports", description="Start the local Airflow.")
    actions.add_parser("down", help="stop it", description="Stop the local Airflow.")
    actions.add_parser("status", help="its processes and health", description="The local Airflow's state.")
    # ---- end airflow
    return top


def _ids(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected dead letter ids, e.g. 12,15,40") from None


def _dead_letters(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    dead = sub.add_parser("dead-letters", help="dead letters: run them through the pipeline again (redrive)",
                          description="A pipeline's dead letters (eosbatch.dead_letters).")
    actions = dead.add_subparsers(dest="action", required=True, metavar="ACTION")
    redrive = actions.add_parser(
        "redrive", help="run chosen dead letters through the pipeline again, exactly once",
        description="After a fix to the transform or the schema: run chosen dead letters (their stored bytes, "
                    "not Kafka's) through the pipeline again in redrive batches of the backfill lane. Those that "
                    "go through are marked redriven in the batch's commit, so a second redrive does nothing; "
                    "those that fail again stay dead letters with the new reason. Filters combine with AND. "
                    "Asks first, on a terminal; elsewhere give --yes.")
    redrive.add_argument("pipeline")
    redrive.add_argument("--all", dest="everything", action="store_true", help="every dead letter not redriven yet")
    redrive.add_argument("--error-like", metavar="PATTERN", help="reasons matching this SQL LIKE pattern, e.g. "
                                                                 "'missing required field%%'")
    redrive.add_argument("--ids", type=_ids, action="extend", default=[], metavar="ID,ID",
                         help="these dead letters (ids as eosbatch.dead_letters and --dry-run show them)")
    redrive.add_argument("--topic", help="dead letters of this source topic")
    redrive.add_argument("--partition", dest="partitions", action="append", default=[], metavar="TOPIC:PARTITION",
                         help="dead letters of this partition; repeat for more")
    redrive.add_argument("--limit", type=int, default=None, metavar="N",
                         help="redrive at most N dead letters, oldest first (default: 10000)")
    redrive.add_argument("--publish", action=argparse.BooleanOptionalAction, default=True,
                         help="publish the redriven records' output (default: yes)")
    _dry_run(redrive, "list the dead letters that would be redriven; change nothing")
    _yes(redrive)
    _json(redrive)


def _stack(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    stack = sub.add_parser("stack", help="the embedded local Kafka + PostgreSQL + Spark Connect server",
                           description="The embedded local Kafka + PostgreSQL + Spark Connect server.")
    actions = stack.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start it (idempotent); prints the exports",
                            description="Start the stack (idempotent). Progress on stderr, the exports on stdout: "
                                        'eval "$(eosbatch stack up)".')
    up.add_argument("--kafka-brokers", type=int, default=None, metavar="N",
                    help="Kafka nodes (KRaft, each a broker and a controller): 3 for a replicated cluster, node i "
                         "on EOSBATCH_KAFKA_PORT + 3(i-1) (default: EOSBATCH_KAFKA_BROKERS, else as started "
                         "before, else 1)")
    up.add_argument("--warm-up", type=int, default=300_000, metavar="RECORDS",
                    help="a Spark Connect server this starts first runs RECORDS records, three times, through a "
                         "batch's read, parse and staging paths, so that the first batch meets it warm "
                         "(default %(default)s; 0: none)")
    actions.add_parser("down", help="stop it", description="Stop the stack (every Kafka node).")
    broker = actions.add_parser("broker", help="stop or start one node of the Kafka cluster",
                                description="Stop (SIGTERM: a controlled shutdown, its leaderships move) or start "
                                            "one node of the stack's Kafka; start returns once the node is "
                                            "registered again and no partition lacks an in-sync replica.")
    broker.add_argument("broker_action", choices=["stop", "start"], metavar="stop|start")
    broker.add_argument("node", type=int, metavar="NODE", help="the node id, 1 to the number of brokers")
    env = actions.add_parser("env", help="print its exports", description="Print the stack's exports.")
    status = actions.add_parser("status", help="its processes, addresses and versions",
                                description="The stack's processes, addresses and versions; with several Kafka "
                                            "nodes, also which node leads each partition of the registered "
                                            "pipelines' topics (EOSBATCH_PIPELINES) and coordinates each lane's "
                                            "transactional id.")
    _json(status)
    for action in (up, env, status):
        action.add_argument("--spark-cluster", action=argparse.BooleanOptionalAction, default=None,
                            help="up: also a Spark standalone master, two workers and a Connect server on them; "
                                 "up and env: export that server as EOSBATCH_SPARK_REMOTE "
                                 "(default: EOSBATCH_SPARK_CLUSTER)")
        action.add_argument("--schema-registry", action=argparse.BooleanOptionalAction, default=None,
                            help="up: also a Confluent-compatible Schema Registry (Apicurio Registry, in memory); "
                                 "up and env: export its URL as EOSBATCH_SCHEMA_REGISTRY_URL "
                                 "(default: EOSBATCH_SCHEMA_REGISTRY)")
        action.add_argument("--postgres-replica", nargs="?", const="sync", choices=("sync", "async"),
                            default=None, help="up: also a streaming replica of PostgreSQL on the next port, "
                                               "synchronous unless `async`; up and env: EOSBATCH_DATABASE_URL "
                                               "names both servers (default: EOSBATCH_POSTGRES_REPLICA)")


def _db(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    db = sub.add_parser("db", help="the ledger schema (Alembic)", description="The ledger schema (Alembic).")
    actions = db.add_subparsers(dest="action", required=True, metavar="ACTION")
    upgrade = actions.add_parser("upgrade", help="to a revision (default: head)",
                                 description="Upgrade the ledger to a revision (default: head).")
    upgrade.add_argument("revision", nargs="?", default="head")
    downgrade = actions.add_parser("downgrade", help="to a revision (default: base, which deletes the ledger)",
                                   description="Downgrade the ledger to a revision. To base (the default) drops the "
                                               "schema eosbatch: every pipeline's ledger and dead letters. That asks "
                                               "first, on a terminal; elsewhere give --yes.")
    downgrade.add_argument("revision", nargs="?", default="base")
    _yes(downgrade)
    actions.add_parser("current", help="the ledger's revision", description="Print the ledger's revision.")
    psql = actions.add_parser("psql", help="psql on the ledger's database (EOSBATCH_DATABASE_URL)",
                              description="Run psql on the database of EOSBATCH_DATABASE_URL (the password in the "
                                          "environment, not the arguments), stopping at the first error: a script "
                                          "on stdin, -c SQL or -f FILE; interactive on a terminal.")
    psql.add_argument("-c", "--command", dest="sql", metavar="SQL", help="run this SQL and exit")
    psql.add_argument("-f", "--file", metavar="FILE", help="run this file of SQL and exit")


def _user_tools(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The commands a new user starts with: a topic, data in it, the pipelines and whether one is ready."""
    topic = sub.add_parser("topic", help="Kafka topics (the embedded broker does not create them on first use)",
                           description="Kafka topics, on the broker the settings name (EOSBATCH_KAFKA_BOOTSTRAP).")
    actions = topic.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="create a topic (an existing one with the same partitions is fine)",
                                description="Create a topic. One that exists with the same partitions is fine; "
                                            "with other partitions it is an error naming both counts.")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1, metavar="N", help="default: 1")
    create.add_argument("--replication-factor", type=int, default=None, metavar="R",
                        help="default: the broker's default.replication.factor (1 on the one-node stack, 3 on the "
                             "three-node one, whose min.insync.replicas is 2)")
    produce = sub.add_parser("produce", help="produce a file of JSON lines into a topic, in Kafka transactions",
                             description="Produce JSON lines (one JSON object a line, the line is the value) into "
                                         "a topic, a Kafka transaction per --per-transaction lines. Every line is "
                                         "checked first: a line that is not a JSON object (or lacks the --key "
                                         "field) is refused naming its number, and nothing is produced.")
    produce.add_argument("topic")
    produce.add_argument("file", metavar="FILE", help="the JSON lines file, or - for stdin")
    produce.add_argument("--key", dest="key_field", metavar="FIELD",
                         help="key each record by this field of its object (default: no key)")
    produce.add_argument("--per-transaction", type=int, default=1000, metavar="N",
                         help="lines per Kafka transaction (default: 1000)")
    produce.add_argument("--transactional-id", metavar="ID",
                         help="the producer's transactional.id (default: eosbatch-produce.<topic>; two runs "
                              "into one topic at once need different ones)")
    pipelines = sub.add_parser("pipelines", help="list the registered pipelines",
                               description="The pipelines of the modules in EOSBATCH_PIPELINES: name, source "
                                           "topics, sink table and mode, output topic.")
    _json(pipelines)
    check = sub.add_parser("check", help="a preflight of a pipeline, without running a batch",
                           description="Checks, without running a batch: the pipeline's module imports, its source "
                                       "and output topics exist (with their partitions) and the broker lets this "
                                       "principal read and write them, the ledger is at the head revision, the "
                                       "transform's output schema (analysed on the Spark Connect server, no job "
                                       "runs), the sink table (if it exists) has the key's unique index and "
                                       "columns whose types take that output, and the database role has the "
                                       "privileges a batch needs. Exit 0 when every check holds, 1 when one fails.")
    check.add_argument("pipeline")
    _json(check)
    warm = sub.add_parser("warm-up", help="warm a Spark Connect server just started (stack up warms its own)",
                          description="Run a batch's read, parse and encoding paths on the Spark Connect server "
                                      "the settings name (EOSBATCH_SPARK_REMOTE), over a topic of their own "
                                      "(eosbatch-engine-warm-up, created on EOSBATCH_KAFKA_BOOTSTRAP's cluster and "
                                      "kept for the next start), so that the first batch after a deploy or a "
                                      "restart runs at the server's steady pace. Writes nothing else: no ledger, "
                                      "staging or sink row.")
    warm.add_argument("--records", type=int, default=300_000, metavar="N", help="per round (default: 300000)")
    warm.add_argument("--rounds", type=int, default=3, metavar="R", help="default: 3")


def _json(command: argparse.ArgumentParser) -> None:
    command.add_argument("--json", action="store_true", help="one JSON document on stdout (logs on stderr)")


def _dry_run(command: argparse.ArgumentParser, what: str) -> None:
    command.add_argument("--dry-run", action="store_true", help=what)


def _yes(command: argparse.ArgumentParser) -> None:
    command.add_argument("--yes", "-y", action="store_true",
                         help="do it without asking (needed where stdin is not a terminal)")
