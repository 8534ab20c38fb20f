"""The micro-batch's step sequence, declared once: plan -> process -> commit -> publish -> finalize.

Each step says what it takes and gives, whether its failure aborts the batch, how a step run on its own (an
Airflow task) keeps the lane's lease, which assets' events it may add, and which thread of an overlapped run
runs it. The sequential run (eosbatch.running.sequential), the overlapped run, the DAG's task group and its
tasks all compose this one declaration; eosbatch.steps.sequence binds the names to the step functions.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

LeaseWork = Literal["none", "renew", "heartbeat"]  # renew the lease first, or keep renewing it while it runs
Stage = Literal["main", "commit", "publish"]  # the thread of an overlapped run that runs the step
Asset = Literal["sink", "output"]


class Step(NamedTuple):
    name: str
    takes_previous: bool  # besides the batch: what the step before it returned (finalize: the records produced)
    gives: str  # what it returns, for the step after it
    abortable: bool  # before the commit: a failure aborts the batch, whose ranges are then planned again
    lease: LeaseWork
    announces: tuple[Asset, ...]  # the assets whose events it may add, for the batches it really changed
    stage: Stage
    releases: bool  # the run's last step: the lane's lease is released after it
    doc: str


PLAN = Step("plan", False, "the planned batch, or None when caught up", False, "none", ("output",), "main", False,
            "Recover unfinished batches, then plan the next one up to the last stable offset.")
PROCESS = Step("process", False, "nothing", True, "heartbeat", (), "main", False,
               "Run the batch on the Spark engine: read the planned ranges, stage results and dead letters.")
COMMIT = Step("commit", False, "the committed batch", True, "renew", ("sink",), "commit", False,
              "One PostgreSQL transaction: sink upsert, dead letters, offsets. After it, only roll forward.")
PUBLISH = Step("publish", False, "the records produced (None: an earlier run published them)", False, "heartbeat",
               (), "publish", False, "One Kafka transaction: the output records and the marker.")
FINALIZE = Step("finalize", True, "the published batch", False, "none", ("output",), "publish", True,
                "Record the batch as published (the output topic's asset event is added here).")
# EOSBATCH_EARLY_PUBLISH: commit, publish and finalize in one step, the records produced while it commits.
COMMIT_AND_PUBLISH = Step("commit_and_publish", False, "the published batch", True, "renew", ("sink", "output"),
                          "commit", True, "Commit the batch while its records are produced; publish; finalize.")

MICRO_BATCH = (PLAN, PROCESS, COMMIT, PUBLISH, FINALIZE)
AFTER_PLAN = MICRO_BATCH[1:]


def after_plan(early_publish: bool = False) -> tuple[Step, ...]:
    """A planned batch's steps, in order; with early publish, commit to finalize are one step."""
    return (PROCESS, COMMIT_AND_PUBLISH) if early_publish else AFTER_PLAN


def step(name: str) -> Step:
    """The declared step of that name."""
    return next(s for s in (*MICRO_BATCH, COMMIT_AND_PUBLISH) if s.name == name)


def in_stage(stage: Stage) -> tuple[Step, ...]:
    """The steps after plan that one thread of an overlapped run runs, in order."""
    return tuple(s for s in AFTER_PLAN if s.stage == stage)
