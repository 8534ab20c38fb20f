"""Tiny micro-batches through Airflow: `dag.test()` of a pipeline's micro-batch DAG, one run per batch.

    python -m bench.airflow_tiny PIPELINE BATCHES RECORDS   (run by `python -m bench.run --tiny`)

Runs in the local Airflow's environment (AIRFLOW_HOME, its metadata database and connections). Before each
run it produces RECORDS orders into the pipeline's topic; each run plans, processes, commits, publishes and
finalizes one batch (the group `batch_1`; `batch_2`'s plan then finds nothing new), its tasks in this process.
Prints one JSON line: each run's wall time and, per task, the durations Airflow recorded, so the fixed cost per
batch and where it goes are both visible.
"""

from __future__ import annotations

import json
import sys
import time

from bench.peer_submit import produce_orders
from eosbatch import config, registry


def main(argv: list[str]) -> None:
    name, batches, records = argv[0], int(argv[1]), int(argv[2])
    from eosbatch.orchestration import dags

    settings = config.load()
    dag = dags.microbatch_dag(registry.get(name))
    topic = registry.get(name).source.topics[0]
    runs: list[dict[str, object]] = []
    for _ in range(batches):
        produce_orders(settings.kafka_bootstrap, topic, records)
        started = time.perf_counter()
        run = dag.test()
        wall = time.perf_counter() - started
        states = {ti.task_id: ti.state for ti in run.get_task_instances()}
        if run.state != "success" or states.get("batch_1.finalize") != "success":
            raise RuntimeError(f"dag.test of {dag.dag_id}: run {run.state}, tasks {states}")
        tasks = {ti.task_id: (ti.end_date - ti.start_date).total_seconds()
                 for ti in run.get_task_instances() if ti.start_date and ti.end_date and ti.state == "success"}
        runs.append({"wall_s": wall, "tasks_s": tasks})
    print(json.dumps({"runs": runs}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
