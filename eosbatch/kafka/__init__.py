"""Kafka: partition bounds at the last stable offset, the transactional publisher, the marker."""
