"""Benchmarks: `python -m bench.run` measures eosbatch's steps against this machine's own ceilings."""

PIPELINES_ENV = "EOSBATCH_BENCH_PIPELINES"  # JSON list of the runs' pipeline specs, read by bench.pipelines
