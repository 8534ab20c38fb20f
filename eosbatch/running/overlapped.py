"""An overlapped run: one runner keeps a batch of its regular lane in each step at once.

    main thread:       plan N+1, process N+1 (Spark)         plan N+2, process N+2 ...
    committer thread:  commit N (PostgreSQL)                 commit N+1 ...
    publisher thread:  publish + finalize N-1 (Kafka)        publish + finalize N ...

Run one after another, the steps leave a core idle: the commit is one PostgreSQL backend, the publish one
producer, while Spark could use both cores. Overlapped, a run that has lag to catch up uses the machine.

Why it stays exactly-once: nothing of the protocol changes, only when its steps run.
- A batch is planned from the ends of the runner's own batches in flight (steps.plan with `epoch`), in the
  same epoch, so nothing is recovered or fenced between them. The commit's compare-and-set (the ledger's
  next offsets equal the batch's starts) lets a batch commit only after every batch before it committed;
  a batch whose predecessor failed can only be refused, and is aborted without being tried.
- Commits run in plan order on one thread, publishes in commit order on another: a lane still publishes
  in commit order, which the marker check relies on (a later batch of a lane publishes only after this one).
- A failure anywhere stops the run: batches not committed are aborted (their ranges are planned again),
  committed ones that were not published stay committed and the next run rolls them forward, as after any
  crash. A crash can leave a few batches committed and not published (each stage holds one batch and has
  one waiting); recovery publishes them in id order, which is commit order.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable

from eosbatch import lease as leases
from eosbatch import steps
from eosbatch.context import Context
from eosbatch.exceptions import EosbatchError
from eosbatch.kafka.publisher import release as release_publishers
from eosbatch.ledger import store
from eosbatch.protocol import sequence
from eosbatch.running.summary import RunSummary
from eosbatch.steps import sequence as bound

Step = Callable[[store.Batch], None]


class _Stage:
    """A thread that runs one step over batches in the order they arrive, holding at most one waiting.
    After its step fails it runs no more: the batches that arrive later go to `on_skip`."""

    def __init__(self, name: str, step: Step, on_skip: Step) -> None:
        self.step, self.on_skip = step, on_skip
        self.error: BaseException | None = None
        self._queue: queue.Queue[store.Batch | None] = queue.Queue(maxsize=1)
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def put(self, batch: store.Batch) -> None:
        self._queue.put(batch)

    def close(self) -> None:
        """Finish the batches given so far, then stop (again: nothing more)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _work(self) -> None:
        while (batch := self._queue.get()) is not None:
            if self.error is not None:
                with contextlib.suppress(Exception):  # the first error is the one reported
                    self.on_skip(batch)
                continue
            try:
                self.step(batch)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
                self.error = exc


def run(ctx: Context, max_batches: int | None = None) -> RunSummary:
    """running.run, with the steps of consecutive batches overlapped (see the module's docstring)."""
    owner = leases.runner_id()
    settings, pipeline_name, log = ctx.settings, ctx.pipeline.name, ctx.log
    finished: list[store.Batch] = []
    errors: list[BaseException] = []

    def abort(batch: store.Batch, why: str) -> None:
        steps.abort(ctx, batch.id, reason=why)

    def commit(batch: store.Batch) -> None:
        if publisher.error is not None:  # the run stops: commit nothing more for a publisher that failed
            not_committed(batch)
            return
        bound.run_in_order(ctx, batch.id, sequence.in_stage("commit"))
        publisher.put(batch)

    def publish(batch: store.Batch) -> None:
        finished.append(bound.run_in_order(ctx, batch.id, sequence.in_stage("publish")))

    def not_committed(batch: store.Batch) -> None:
        abort(batch, "aborted: a batch before it in this overlapped run failed")

    def not_published(batch: store.Batch) -> None:
        log(f"batch {batch.id}: committed; not published after the failure of a batch before it "
            "(the next run publishes it)")

    publisher = _Stage(f"eosbatch-publish-{pipeline_name}", publish, not_published)
    committer = _Stage(f"eosbatch-commit-{pipeline_name}", commit, not_committed)
    try:
        batch = steps.plan(ctx, owner)  # recovers the lane and takes its epoch
        if batch is not None:
            if settings.early_publish and ctx.pipeline.output is not None:
                log("not published early (an overlapped run commits one batch while it publishes the one "
                    "before; each batch is published from its outbox)")
            epoch, planned = batch.epoch, 1
            with leases.Heartbeat(settings, pipeline_name, "regular", owner) as lease, \
                    contextlib.ExitStack() as stages:
                # The last commits and publishes finish while the heartbeat still renews the lease.
                stages.callback(publisher.close)
                stages.callback(committer.close)
                while batch is not None:
                    try:
                        for step in sequence.in_stage("main"):  # aborted below on failure, as the plan
                            bound.call(step, ctx, batch.id)
                        lease.check()
                        # Planned before this batch goes to commit: the plan waits for a commit under way
                        # (both lock the next offsets), and this way it never waits for this batch's.
                        more = max_batches is None or planned < max_batches
                        upcoming = steps.plan(ctx, owner, epoch=epoch) if more else None
                    except BaseException as exc:
                        with contextlib.suppress(Exception):
                            abort(batch, f"{type(exc).__name__}: {exc}")
                        raise
                    planned += upcoming is not None
                    committer.put(batch)
                    batch = upcoming
                    if batch is not None and (committer.error or publisher.error):
                        not_committed(batch)
                        batch = None
    except BaseException as exc:
        errors.append(exc)
    finally:
        committer.close()
        publisher.close()
        release_publishers()
        with contextlib.suppress(EosbatchError):  # a bad setting was reported by plan already
            leases.release(settings, pipeline_name, "regular", owner)
    # A stage's error comes first: the main thread's (a batch it aborted, a lost lane) follows from it or
    # came later, since the main thread looks at the stages only between its steps.
    errors = [e for e in (committer.error, publisher.error) if e is not None] + errors
    if errors:
        raise errors[0]
    summary = RunSummary(0, 0, 0, 0, 0)
    for done in finished:
        summary = summary.add(done)
    return summary
