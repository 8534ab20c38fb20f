"""A lane's producer epoch, bumped with confluent_kafka and read from outside with Kafka's own Admin API (issue 37,
item 7): the code of `python -m tests.epoch_rollover` and of its fast check in the suite."""
