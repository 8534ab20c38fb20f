"""How `eosbatch status` prints: one pipeline in detail, or every pipeline at once (eosbatch.overview computes
both; --json prints the same documents as they are)."""

from __future__ import annotations

import sys


def print_one(report: dict) -> None:  # type: ignore[type-arg]
    print(f"pipeline {report['pipeline']}")
    print(f"  {'partition':<24} {'next':>10} {'LSO':>10} {'lag':>8}")
    for p in report["partitions"]:
        print(f"  {p['partition']:<24} {str(p['next_offset']):>10} {p['last_stable_offset']:>10} {str(p['lag']):>8}")
    for problem in report.get("source_problems", []):
        print(f"  STOPPED: {problem}")
    print_lanes([s for s in report.get("lanes", []) if not report.get("source_problems")])
    for r in report.get("resets", []):
        print(f"  reset {r['id']} at {r['at']}: {r['reset']} ({r['reason']})")
    print(f"  {'batch':>6} {'kind':<9} {'state':<10} {'read':>8} {'sink':>8} {'dead':>6} {'out':>8}  ranges")
    for b in report["batches"]:
        print(f"  {b['id']:>6} {b['kind']:<9} {b['state']:<10} {str(b['records_read']):>8} {str(b['sink_rows']):>8} "
              f"{str(b['dead_letters']):>6} {str(b['published']):>8}  {' '.join(b['ranges'])}")
        if b["error"]:
            print(f"         error: {b['error']}")


def print_lanes(lanes: list) -> None:  # type: ignore[type-arg]
    for s in lanes:
        if s["state"] in ("blocked", "failing"):
            batch = f" batch {s['batch']}" if s["batch"] is not None else ""
            print(f"  {s['state'].upper()} {s['lane']} lane{batch}: {s['error']}")


def print_every(every: list) -> None:  # type: ignore[type-arg]
    if not every:
        print("no pipelines registered (set EOSBATCH_PIPELINES to your pipeline modules)", file=sys.stderr)
        return
    print(f"{'pipeline':<28} {'lag':>10}  {'last batch':<10} {'kind':<9} {'state':<10} {'read':>8} {'sink':>8} "
          f"{'dead':>6}  updated")
    for p in every:
        b = p["last_batch"]
        last = (f"{b['id']:<10} {b['kind']:<9} {b['state']:<10} {str(b['records_read']):>8} {str(b['sink_rows']):>8} "
                f"{str(b['dead_letters']):>6}  {b['updated']}") if b else "-"
        lag = "-" if p["lag"] is None else str(p["lag"])
        print(f"{p['pipeline']:<28} {lag:>10}  {last}")
        if p["error"]:
            print(f"  ERROR: {p['error']}")
        print_lanes(p["lanes"])
