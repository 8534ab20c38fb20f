"""Redriving dead letters on the real stack, through the `eosbatch` CLI as a user runs it: a pipeline whose
schema makes some records dead letters, the schema fixed, `eosbatch dead-letters redrive`, then the
independent count (input vs sink vs read_committed output vs dead letters, the redriven ones marked); a second
redrive does nothing, and a record that fails again keeps the new reason."""

from __future__ import annotations

import pytest

from tests.redriving import Redrive

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.mark.slow
def test_redrive_after_a_schema_fix_runs_each_dead_letter_once(settings, unique):
    scenario = Redrive(settings, unique)
    scenario.ok("run", scenario.pipeline, fixed=False)
    scenario.assert_exactly_once(fixed=False, verify=False)
    dead = scenario.dead_letters()
    missing = sorted(i for i, e, _, _ in dead.values() if e == "missing required field 'n'")
    assert len(missing) == 6 and len(dead) == 10

    # Asked without --yes where nobody can answer: refused, nothing changes.
    refused = scenario.cli("dead-letters", "redrive", scenario.pipeline, "--all", fixed=True)
    assert refused.returncode == 2 and "give --yes" in refused.stderr
    listed = scenario.redrive("--error-like", "missing required%", "--dry-run")
    assert [d["id"] for d in listed["chosen"]] == missing and listed["dry_run"]
    capped = scenario.redrive("--all", "--limit", "2", "--dry-run")
    assert [d["id"] for d in capped["chosen"]] == sorted(i for i, _, _, _ in dead.values())[:2]  # oldest first

    # The schema fixed: the missing-n records go through in one redrive batch; the broken ones fail again.
    done = scenario.redrive("--all", "--limit", "100", "--yes")
    assert (len(done["chosen"]), done["redriven"], done["dead_letters"]) == (10, 6, 4)
    assert done["published"] == 6 and len(done["batches"]) == 1
    assert [k for _, k, _ in scenario.batches()] == ["regular", "redrive"]
    scenario.assert_exactly_once(fixed=True, verify=False)

    # A second redrive of the same records does nothing; only the broken ones are left to choose.
    again = scenario.redrive("--error-like", "missing required%", "--yes")
    assert again["chosen"] == [] and again["batches"] == []
    left = scenario.redrive("--all", "--dry-run")
    assert sorted(d["id"] for d in left["chosen"]) == sorted(i for i, _, by, _ in scenario.dead_letters().values()
                                                              if by is None)
    assert len(scenario.batches()) == 2
    scenario.assert_exactly_once(fixed=True, recompute=True)
