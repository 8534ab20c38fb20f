"""Spark: read planned ranges, parse and transform them, and stage the results from the executors."""
