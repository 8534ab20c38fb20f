"""How `eosbatch dead-letters redrive` asks and prints (over eosbatch.commands.redrive)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from eosbatch import commands
from eosbatch.protocol.redrive import DEFAULT_LIMIT
from eosbatch.redrive import RedriveReport, describe


def print_json(document: object) -> None:
    print(json.dumps(document, indent=2))


def redrive(args: argparse.Namespace, interactive: bool, refusal: Callable[..., str | None],
            refuse: Callable[[str], int]) -> int:
    """A dry run lists the chosen dead letters. A real one asks first (on a terminal: after listing how many
    it would take), unless --yes."""
    log = (lambda line: print(line, file=sys.stderr)) if args.json else print

    def run(dry_run: bool) -> RedriveReport:
        return commands.redrive(args.pipeline, args.everything, args.error_like, args.ids, args.topic,
                                args.partitions, args.limit, args.publish, dry_run, log=log)

    if not args.dry_run and not args.yes:
        consequence = (f"redrive of pipeline {args.pipeline}'s chosen dead letters runs them through its transform "
                       "into its sink" + (" and output topic" if args.publish else "") + "; those that go through "
                       "are marked redriven")
        if interactive:
            consequence += f" ({len(run(True).chosen)} dead letter(s) chosen now)"
        why = refusal(consequence, yes=False)
        if why is not None:
            return refuse(why)
    done = run(args.dry_run)
    if args.json:
        print_json({"pipeline": args.pipeline, "dry_run": done.dry_run,
                    "chosen": [d._asdict() for d in done.chosen],
                    **({} if done.dry_run else
                       {"batches": list(done.batches), "records_read": done.records, "sink_rows": done.sink_rows,
                        "dead_letters": done.dead_letters, "redriven": len(done.chosen) - done.dead_letters,
                        "published": done.published})})
    elif done.dry_run:
        print("dry run: nothing changed")
        for line in describe(done.chosen, args.limit or DEFAULT_LIMIT):
            print(line)
    else:
        print(f"{len(done.batches)} redrive batches: {len(done.chosen)} dead letters chosen, "
              f"{len(done.chosen) - done.dead_letters} redriven, {done.dead_letters} failed again; "
              f"{done.sink_rows} sink rows, {done.published} records published")
    return 0
