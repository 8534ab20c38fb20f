"""The peer: the same work as the bench pipeline, written the way a Spark user would write it with Structured
Streaming (spark-submit this file; bench.run does). At-least-once: a crash between the upsert and the
checkpoint replays the micro-batch (the upsert absorbs it) and re-sends its output records (duplicates).

    peer.py once  TOPIC OUTPUT SINK CHECKPOINT RESULT_JSON   # one availableNow trigger over the whole topic
    peer.py tiny  TOPIC OUTPUT SINK CHECKPOINT RESULT_JSON ROUNDS RECORDS  # produce, trigger, time; ROUNDS times

- source: Spark's Kafka source, read_committed, JSON parsed with the bench pipeline's schema;
- foreachBatch: JDBC append into an UNLOGGED staging table, then INSERT ... ON CONFLICT DO UPDATE into the
  sink (latest offset per order id wins) and TRUNCATE of the staging table, in one psycopg2 transaction;
- the output: Spark's Kafka sink (not transactional), key = order id, value = the row as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import psycopg2
from psycopg2 import sql

from bench.pipelines import ORDER_SCHEMA

COLUMNS = ("order_id", "customer_id", "amount", "status", "note", "partition", "offset")


def _prepare(dsn: str, sink: str) -> None:
    connection = psycopg2.connect(dsn)
    with connection, connection.cursor() as cur:
        cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (order_id text PRIMARY KEY, customer_id text, "
                            "amount double precision, status text, note text, \"partition\" integer, "
                            "\"offset\" bigint)").format(sql.Identifier(sink)))
        cur.execute(sql.SQL("CREATE UNLOGGED TABLE IF NOT EXISTS {} (LIKE {})").format(
            sql.Identifier(f"{sink}_stage"), sql.Identifier(sink)))
    connection.close()


def _upsert(dsn: str, sink: str) -> str:
    names = sql.SQL(", ").join(map(sql.Identifier, COLUMNS))
    updates = sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in COLUMNS[1:])
    connection = psycopg2.connect(dsn)
    try:
        return sql.SQL(
            "INSERT INTO {sink} ({names}) SELECT DISTINCT ON (order_id) {names} FROM {stage} "
            "ORDER BY order_id, \"partition\", \"offset\" DESC "
            "ON CONFLICT (order_id) DO UPDATE SET {updates}; TRUNCATE {stage}").format(
            sink=sql.Identifier(sink), stage=sql.Identifier(f"{sink}_stage"), names=names,
            updates=updates).as_string(connection)
    finally:
        connection.close()


def build(spark: Any, bootstrap: str, dsn: str, jdbc_url: str, topic: str, output: str, sink: str,
          checkpoint: str) -> Any:
    from pyspark.sql import functions as F

    _prepare(dsn, sink)
    upsert = _upsert(dsn, sink)
    orders = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("kafka.isolation.level", "read_committed").option("subscribe", topic)
              .option("startingOffsets", "earliest").load()
              .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"), "partition", "offset")
              .select("o.*", "partition", "offset").select(*COLUMNS))

    def each(batch: Any, _batch_id: int) -> None:
        batch.persist()
        (batch.write.format("jdbc").option("url", jdbc_url).option("dbtable", f'"{sink}_stage"')
         .option("driver", "org.postgresql.Driver").option("batchsize", 10_000).mode("append").save())
        connection = psycopg2.connect(dsn)
        with connection, connection.cursor() as cur:
            cur.execute(upsert)
        connection.close()
        (batch.select(F.col("order_id").alias("key"), F.to_json(F.struct(*COLUMNS)).alias("value"))
         .write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", output).save())
        batch.unpersist()

    return (orders.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint)
            .trigger(availableNow=True))


def main(argv: list[str]) -> None:
    from pyspark.sql import SparkSession

    mode, topic, output, sink, checkpoint, result = argv[:6]
    bootstrap = os.environ["EOSBATCH_KAFKA_BOOTSTRAP"]
    dsn = os.environ["BENCH_PEER_DSN"]
    jdbc_url = os.environ["BENCH_PEER_JDBC"]
    started = time.perf_counter()
    spark = SparkSession.builder.appName("bench-peer").config("spark.ui.enabled", "false").getOrCreate()
    session_s = time.perf_counter() - started
    timings: list[float] = []
    rounds = int(argv[6]) if mode == "tiny" else 1
    for _ in range(rounds):
        if mode == "tiny":
            from bench.peer_submit import produce_orders
            produce_orders(bootstrap, topic, int(argv[7]))
        began = time.perf_counter()
        build(spark, bootstrap, dsn, jdbc_url, topic, output, sink, checkpoint).start().awaitTermination()
        timings.append(time.perf_counter() - began)
    spark.stop()
    with open(result, "w") as out:
        json.dump({"session_s": session_s, "triggers_s": timings, "total_s": time.perf_counter() - started}, out)


if __name__ == "__main__":
    main(sys.argv[1:])
