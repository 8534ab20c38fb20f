"""What Spark's JVMs log, as log4j2 properties, for both engines: the Connect server's (eosbatch.stack) and
each spark-submit driver's (eosbatch.engine.submit).

The Kafka clients log every consumer's whole configuration and each seek at INFO (~150,000 lines for one
batch of 1M records, 75 MB in a quarter of an hour): WARN keeps their errors. The rest is Spark's own
default levels.
"""

from __future__ import annotations

from pathlib import Path

LOG_MIB = 20  # a log rolls over at this size, and LOG_FILES of them are kept
LOG_BYTES = f"{LOG_MIB}MB"
LOG_FILES = 5

LEVELS = """\
rootLogger.level = info
logger.kafka.name = org.apache.kafka
logger.kafka.level = warn
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.replexprTyper.name = org.apache.spark.repl.SparkIMain$exprTyper
logger.replexprTyper.level = info
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
"""
_LAYOUT = "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex"


def to_file(log: Path) -> str:
    """A long-lived JVM's appender: its own log file, rolled over by size."""
    return f"""\
rootLogger.appenderRef.file.ref = file
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {log}
appender.file.filePattern = {log}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = {_LAYOUT}
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = {LOG_BYTES}
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = {LOG_FILES}
"""


# to stderr: a cluster's executors (their worker keeps and rolls it: spark.executor.logs.rolling.*), and a
# spark-submit driver (its runner appends it to the pipeline's log and rolls that: roll_over below)
TO_STDERR = f"""\
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = {_LAYOUT}
"""


def roll_over(log: Path, max_bytes: int = LOG_MIB * 1024 * 1024, keep: int = LOG_FILES) -> bool:
    """Before appending a run to `log`: once it reached `max_bytes`, it becomes `log.1` (`log.1` becomes
    `log.2`, ..., `log.<keep>` is dropped), as log4j2's RollingFile does. True when it rolled."""
    try:
        if log.stat().st_size < max_bytes:
            return False
    except FileNotFoundError:
        return False
    log.with_name(f"{log.name}.{keep}").unlink(missing_ok=True)
    for i in range(keep - 1, 0, -1):
        older = log.with_name(f"{log.name}.{i}")
        if older.exists():
            older.rename(log.with_name(f"{log.name}.{i + 1}"))
    log.rename(log.with_name(f"{log.name}.1"))
    return True
