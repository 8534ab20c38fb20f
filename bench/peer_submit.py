"""The Structured Streaming peer (bench/peer.py) from the bench's side: spark-submitted with the same master,
memory and jars as eosbatch's spark-submit engine, and the orders the tiny mode gives both sides."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from bench.harness import _padding
from eosbatch import config, stack
from eosbatch.config import Settings
from eosbatch.engine.submit import CONNECT_MODE
from examples.orders.generate import generate


def produce_orders(bootstrap: str, topic: str, n: int, seed: int = 0) -> None:
    """N more orders in committed transactions (the tiny mode's input, for both sides)."""
    generate(config.load({**os.environ, config.KAFKA_BOOTSTRAP: bootstrap}), topic=topic, records=n,
             partitions=1, transaction_size=max(n, 1), abort_every=0, malformed_every=0,
             value_padding=_padding(), seed=seed or int(time.time() * 1000) % 1_000_000)


def _jdbc_jar() -> list[str]:
    from eosbatch.stack import maven

    cache = stack.home() / "cache"
    folder = maven.resolve("postgresql-jdbc-42.7.7", ["org.postgresql:postgresql:42.7.7"], cache,
                           cache / "maven.log", transitive=False)
    return [str(j) for j in maven.jars(folder)]


def run_peer(settings: Settings, args: list[str]) -> tuple[dict[str, Any], float]:
    """spark-submit bench/peer.py with the same master, memory and jars as eosbatch's spark-submit engine;
    its result and the wall time including its JVM's start."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path
    from urllib.parse import urlsplit

    import pyspark

    url = urlsplit(settings.psycopg_dsn)
    jdbc = f"jdbc:postgresql://{url.hostname}:{url.port}{url.path}?user={url.username}"
    work = tempfile.TemporaryDirectory(prefix="bench-peer-")
    result = Path(work.name) / "result.json"
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    root = Path(__file__).resolve().parents[1]
    command = [str(submit), "--master", "local[2]", "--conf", "spark.driver.memory=2g",
               "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=4",
               "--jars", ",".join([*settings.spark_jars, *_jdbc_jar()]), str(root / "bench" / "peer.py"),
               args[0], *args[1:5], str(result), *args[5:]]
    env = {**os.environ, "PYTHONPATH": str(root), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "BENCH_PEER_DSN": settings.psycopg_dsn, "BENCH_PEER_JDBC": jdbc}
    for name in CONNECT_MODE:  # this process may have opened a Connect session: the peer is a classic app
        env.pop(name, None)
    started = time.perf_counter()
    log = stack.home() / "logs" / "bench-peer.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with work, log.open("ab") as out:
        done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"the peer failed (exit {done.returncode}); see {log}")
        return json.loads(result.read_text()), wall
