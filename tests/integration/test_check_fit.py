"""`eosbatch check` beyond topics and the ledger, on the real stack through the CLI: the transform's output
schema, analysed on the Spark Connect server, against an existing sink table (a table that fits passes; one
with a wrong type, a missing column and a NOT NULL column the transform does not fill fails, naming each), the
role's PostgreSQL privileges (a role that may not write the sink is told which), and the Kafka principal's
topic operations as the broker reports them (one without WRITE on the output topic is told so)."""

from __future__ import annotations

import json
import secrets

import psycopg2
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from psycopg2 import sql
from sqlalchemy.engine import make_url

from eosbatch import stack
from eosbatch.cli_parser import EXIT_VIOLATION
from eosbatch.ledger import store
from eosbatch.stack.kafka import add_scram_user
from tests.scenario import Scenario

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def checks(scenario: Scenario) -> tuple[int, dict[str, dict]]:
    done = scenario.cli("check", scenario.pipeline, "--json")
    assert done.returncode in (0, EXIT_VIOLATION), done.stderr[-3000:]
    return done.returncode, {c["name"]: c for c in json.loads(done.stdout)["checks"]}


def test_the_sink_fits_the_transform_output_or_each_misfit_is_named(settings, unique) -> None:
    s = Scenario(settings, unique, "latest", records=0)
    table = f"public.crash_latest_{unique}"
    code, found = checks(s)
    assert code == 0 and found[f"sink table {table}"]["found"] == "does not exist yet; the first batch creates it"
    output = found["transform output"]["found"]
    assert output == "order_id text, customer_id text, amount double precision, status text, partition integer, " \
                     "offset bigint"
    columns = [tuple(c.split(" ", 1)) for c in output.split(", ")]

    sink = sql.Identifier("public", f"crash_latest_{unique}")
    fitting = sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in columns)
    with store.transaction(settings) as cur:  # the transform's own types, and one wider (integer -> bigint)
        cur.execute(sql.SQL("CREATE TABLE {} ({}, PRIMARY KEY (order_id))").format(sink, fitting))
        cur.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN partition TYPE bigint").format(sink))
    try:
        code, found = checks(s)
        assert code == 0, found
        assert found[f"sink table {table}"]["found"] == ("has a unique index on ['order_id'], and its columns take "
                                                          "the transform's output")
        with store.transaction(settings) as cur:
            cur.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN customer_id TYPE integer USING NULL, DROP COLUMN amount, "
                                "ADD COLUMN region text NOT NULL").format(sink))
        code, found = checks(s)
        assert code == EXIT_VIOLATION
        verdict = found[f"sink table {table}"]
        assert not verdict["ok"] and verdict["found"] == (
            "no column amount (the transform returns it as double precision); column customer_id is integer, the "
            "transform returns text, which PostgreSQL does not assign to it; column region is NOT NULL without a "
            "default, and the transform does not return it")
        shown = s.cli("check", s.pipeline).stdout
        assert f"FAIL  sink table {table}: no column amount" in shown and f"{s.pipeline}: NOT READY" in shown
    finally:
        with store.transaction(settings) as cur:
            cur.execute(sql.SQL("DROP TABLE {}").format(sink))


def test_a_role_that_may_not_write_the_sink_is_told_what_it_lacks(settings, unique) -> None:
    password = secrets.token_urlsafe(12)
    role, database = f"check_{unique}", f"check_{unique}"
    url = stack.add_password_role(role, password, database)
    s = Scenario(settings, unique, "latest", records=0)
    s.env_overrides["EOSBATCH_DATABASE_URL"] = url.replace(f"{role}@", f"{role}:{password}@")
    assert s.cli("db", "upgrade").returncode == 0
    code, found = checks(s)
    assert code == 0 and found["postgres privileges"]["found"] == (
        f"role {role} has what a batch needs on the sink and the ledger")

    owner = make_url(settings.database_url).set(database=database)  # the stack's superuser, in the role's database
    db = psycopg2.connect(host=owner.host, port=owner.port, user=owner.username, dbname=database)
    try:
        with db, db.cursor() as cur:
            cur.execute(sql.SQL("CREATE TABLE {} (order_id text PRIMARY KEY)").format(
                sql.Identifier("public", f"crash_latest_{unique}")))
            cur.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier("public", f"crash_latest_{unique}"),
                                                                   sql.Identifier(role)))
    finally:
        db.close()
    code, found = checks(s)
    assert code == EXIT_VIOLATION
    assert found["postgres privileges"]["found"] == (
        f"role {role} lacks INSERT on public.crash_latest_{unique}; UPDATE on public.crash_latest_{unique}")


def test_a_principal_without_write_on_the_output_topic_is_told(settings, unique) -> None:
    s = Scenario(settings, unique, "latest", records=0)
    code, found = checks(s)
    assert found["kafka permissions"]["ok"] and found["kafka permissions"]["checked"]  # the open listener's super user
    user, password = f"check_{unique}", secrets.token_urlsafe(12)
    add_scram_user(settings.kafka_bootstrap, user, password)
    allow, literal = AclPermissionType.ALLOW, ResourcePatternType.LITERAL
    granted = [(s.input, AclOperation.READ), (s.input, AclOperation.DESCRIBE), (s.output, AclOperation.DESCRIBE)]
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    for future in admin.create_acls([AclBinding(ResourceType.TOPIC, topic, literal, f"User:{user}", "*", op, allow)
                                     for topic, op in granted]).values():
        future.result(timeout=30)
    host, _, port = settings.kafka_bootstrap.rpartition(":")
    s.env_overrides = {"EOSBATCH_KAFKA_BOOTSTRAP": f"{host}:{int(port) + 2}",  # the SASL listener
                       "EOSBATCH_KAFKA_CONFIG": json.dumps({"security.protocol": "SASL_PLAINTEXT",
                                                            "sasl.mechanism": "SCRAM-SHA-512",
                                                            "sasl.username": user, "sasl.password": password})}
    code, found = checks(s)
    assert code == EXIT_VIOLATION
    assert found["kafka permissions"]["found"] == (
        f"the principal lacks WRITE on Topic {s.output}, DESCRIBE_CONFIGS on Topic {s.output}")
    assert found[f"source topic {s.input}"]["ok"] and found[f"output topic {s.output}"]["ok"]
