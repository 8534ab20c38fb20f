"""eosbatch against the embedded broker's SASL listener (SCRAM-SHA-512, ACLs enforced by StandardAuthorizer):
the same librdkafka settings (EOSBATCH_KAFKA_CONFIG) configure every client, the Spark reader included. A
principal with the ACLs a pipeline needs runs it exactly-once; one without WRITE on the output topic gets a
terminal error naming the topic and the permission; a wrong password fails fast and says so."""

from __future__ import annotations

import json
import secrets
import time

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from eosbatch import config, stack
from eosbatch.cli import EXIT_TERMINAL
from eosbatch.stack.kafka import add_scram_user
from tests.scenario import Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _sasl_bootstrap(settings) -> str:
    host, _, port = settings.kafka_bootstrap.rpartition(":")
    return f"{host}:{int(port) + 2}"  # the embedded broker's SASL_PLAINTEXT listener (stack/kafka.py)


def _grant(settings, user: str, scenario: Scenario, write_output: bool) -> None:
    """What a pipeline needs: read its input, write its output, its consumer groups and transactional ids
    (prefixed by the pipeline's name), as a Kafka admin would grant them."""
    principal = f"User:{user}"
    allow = AclPermissionType.ALLOW
    topic, prefixed, literal = ResourceType.TOPIC, ResourcePatternType.PREFIXED, ResourcePatternType.LITERAL
    wanted = [(topic, scenario.input, literal, AclOperation.READ),
              (topic, scenario.input, literal, AclOperation.DESCRIBE),
              (topic, scenario.output, literal, AclOperation.DESCRIBE),
              (topic, scenario.output, literal, AclOperation.DESCRIBE_CONFIGS),  # its max.message.bytes
              (ResourceType.GROUP, f"eosbatch.{scenario.pipeline}", prefixed, AclOperation.READ),
              (ResourceType.TRANSACTIONAL_ID, f"eosbatch.{scenario.pipeline}", prefixed, AclOperation.WRITE),
              (ResourceType.TRANSACTIONAL_ID, f"eosbatch.{scenario.pipeline}", prefixed, AclOperation.DESCRIBE)]
    if write_output:
        wanted.append((topic, scenario.output, literal, AclOperation.WRITE))
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    bindings = [AclBinding(kind, name, pattern, principal, "*", operation, allow)
                for kind, name, pattern, operation in wanted]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)


def _as(scenario: Scenario, settings, user: str, password: str) -> None:
    sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
            "sasl.password": password}
    scenario.env_overrides.update({"EOSBATCH_KAFKA_BOOTSTRAP": _sasl_bootstrap(settings),
                                   "EOSBATCH_KAFKA_CONFIG": json.dumps(sasl)})


def test_sasl_principals_with_and_without_write_access(settings, unique, kafka_reader) -> None:
    scenario = Scenario(settings, unique, "totals", batch=100_000)  # input written by the admin (open listener)
    scenario.env_overrides[config.KAFKA_READER] = kafka_reader  # each reads with the principal's credentials
    writer, reader = f"eos_{unique}", f"noout_{unique}"
    passwords = {writer: secrets.token_urlsafe(12), reader: secrets.token_urlsafe(12)}
    for user, password in passwords.items():
        add_scram_user(settings.kafka_bootstrap, user, password)
    _grant(settings, writer, scenario, write_output=True)
    _grant(settings, reader, scenario, write_output=False)

    # Without WRITE on the output topic: the batch commits (PostgreSQL), its publish is refused for good.
    _as(scenario, settings, reader, passwords[reader])
    refused = scenario.run()
    print(refused.stderr[-1500:])
    assert refused.returncode == EXIT_TERMINAL, refused.stderr[-3000:]
    assert f"WRITE on Topic {scenario.output}" in refused.stderr
    assert passwords[reader] not in refused.stderr + refused.stdout

    # A wrong password: a clear, fast refusal.
    _as(scenario, settings, writer, "wrong-" + passwords[writer])
    started = time.monotonic()
    wrong = scenario.run()
    took = time.monotonic() - started
    print(f"wrong password: exit {wrong.returncode} after {took:.1f}s: {wrong.stderr.strip().splitlines()[-1]}")
    assert wrong.returncode == EXIT_TERMINAL and took < 60, wrong.stderr[-3000:]
    assert "authentication" in wrong.stderr.lower() and "wrong-" + passwords[writer] not in wrong.stderr

    # The principal with the pipeline's ACLs: the committed batch rolls forward, and more input follows.
    _as(scenario, settings, writer, passwords[writer])
    scenario.produce(600)
    done = scenario.run()
    assert done.returncode == 0, done.stderr[-3000:]
    scenario.assert_exactly_once()
    assert {state for _, _, state in scenario.batches()} == {"published"}
    logs = stack.home() / "spark-connect" / "spark-connect.log"
    assert passwords[writer] not in logs.read_text(errors="replace")
