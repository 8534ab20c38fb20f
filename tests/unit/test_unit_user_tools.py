"""The new user's commands, their pure parts: JSON lines checked before anything is produced (the bad line
named), the preflight's verdicts, and each command's own help."""

from __future__ import annotations

import pytest

from eosbatch import config, preflight
from eosbatch.cli_parser import parser
from eosbatch.kafka import json_lines
from eosbatch.kafka.json_lines import BadLine
from eosbatch.ledger import connection
from eosbatch.ledger.sinks import Column

pytestmark = pytest.mark.unit


def test_each_line_is_a_record_whose_value_is_the_line_as_written() -> None:
    lines = ['{"id": "a", "n": 1}\n', "\n", '  {"id": 7}  \n', '{"id": true}']
    assert json_lines.parse(lines, key_field="id") == [
        (b"a", b'{"id": "a", "n": 1}'), (b"7", b'{"id": 7}'), (b"true", b'{"id": true}')]
    assert json_lines.parse(lines) == [(None, b'{"id": "a", "n": 1}'), (None, b'{"id": 7}'), (None, b'{"id": true}')]


@pytest.mark.parametrize(("bad", "says"), [("not json", "not JSON"), ("[1, 2]", "a JSON list, not an object"),
                                           ('"text"', "a JSON str, not an object"),
                                           ('{"other": 1}', "no value for the key field 'id'"),
                                           ('{"id": null}', "no value for the key field 'id'")])
def test_a_bad_line_is_refused_naming_its_number(bad: str, says: str) -> None:
    lines = ['{"id": 1}', "", bad, '{"id": 2}']
    with pytest.raises(BadLine) as refused:
        json_lines.parse(lines, key_field="id")
    assert str(refused.value).startswith("line 3: ")
    assert says in str(refused.value)
    assert "nothing produced" in str(refused.value)


def test_the_default_transactional_id_is_one_per_topic() -> None:
    assert json_lines.default_transactional_id("orders") == "eosbatch-produce.orders"


def test_topic_checks_name_the_partitions_or_the_way_to_create_the_topic() -> None:
    assert preflight.topic_check("source topic", "orders", 3) == ("source topic orders", True, "3 partition(s)", True)
    missing = preflight.topic_check("output topic", "totals", None)
    assert not missing.ok and "eosbatch topic create totals" in missing.found
    assert missing.line().startswith("FAIL  output topic totals: does not exist")


def test_the_ledger_must_be_at_the_head_revision() -> None:
    assert preflight.ledger_check("0012", "0012").ok
    behind = preflight.ledger_check("0011", "0012")
    assert not behind.ok and "0011" in behind.found and "0012" in behind.found and "db upgrade" in behind.found
    assert "has no ledger" in preflight.ledger_check(None, "0012").found


def test_the_sink_table_needs_a_unique_index_on_exactly_the_key_where_it_exists() -> None:
    assert preflight.sink_check("public.t", ["a"], exists=False, unique_keys=()).ok
    assert preflight.sink_check("public.t", ["b", "a"], exists=True, unique_keys=[("a", "b")]).ok
    wrong = preflight.sink_check("public.t", ["a"], exists=True, unique_keys=[("a", "b")])
    assert not wrong.ok and "no unique index on exactly ['a']" in wrong.found


def test_the_sink_must_take_the_transform_output_and_each_misfit_is_named() -> None:
    fits = preflight.sink_check("public.t", ["a"], exists=True, unique_keys=[("a",)], misfits=[])
    assert fits.ok and fits.found == "has a unique index on ['a'], and its columns take the transform's output"
    unknown = preflight.sink_check("public.t", ["a"], exists=True, unique_keys=[("a",)], misfits=None)
    assert unknown.ok and "columns" not in unknown.found
    both = preflight.sink_check("public.t", ["a"], exists=True, unique_keys=[], misfits=["no column b", "column c"])
    assert not both.ok and both.found == ("has no unique index on exactly ['a']; an idempotent upsert needs one; "
                                          "no column b; column c")


def test_the_transform_output_is_shown_or_skipped_with_the_reason() -> None:
    shown = preflight.transform_check([Column("a", "text"), Column("n", "bigint")], "connect")
    assert shown.ok and shown.found == "a text, n bigint"
    skipped = preflight.transform_check(None, "submit")
    assert skipped.ok and not skipped.checked and skipped.line().startswith("skip  transform output: not checked:")


def test_privileges_name_each_one_the_role_lacks() -> None:
    assert preflight.privileges_check("app", []).ok
    lacking = preflight.privileges_check("app", ["INSERT on public.t", "CREATE on schema eosbatch"])
    assert not lacking.ok and lacking.found == "role app lacks INSERT on public.t; CREATE on schema eosbatch"


def test_kafka_permissions_as_the_broker_reports_them() -> None:
    wanted = {"in": preflight.SOURCE_OPERATIONS, "out": preflight.OUTPUT_OPERATIONS}
    no_authorizer = preflight.kafka_permissions_check(wanted, None)
    assert no_authorizer.ok and not no_authorizer.checked
    assert no_authorizer.found == "not checked: broker has no authorizer"
    everything = frozenset({"READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS"})
    assert preflight.kafka_permissions_check(wanted, {"in": everything, "out": everything}).ok
    refused = preflight.kafka_permissions_check(wanted, {"in": frozenset({"READ", "DESCRIBE"}),
                                                         "out": frozenset({"DESCRIBE"})})
    assert not refused.ok and refused.found == "the principal lacks WRITE on Topic out, DESCRIBE_CONFIGS on Topic out"
    assert not preflight.kafka_permissions_check(wanted, {}).checked  # the broker reported nothing


def test_the_verdict_holds_only_when_every_check_holds() -> None:
    good = preflight.pipeline_check("p", None)
    bad = preflight.pipeline_check("p", "no pipeline named 'p'")
    assert good.ok and not bad.ok and bad.found == "no pipeline named 'p'"
    assert preflight.passed([good]) and not preflight.passed([good, bad])
    assert good.line() == "ok    pipeline: p is registered"


@pytest.mark.parametrize("command", [("topic", "create"), ("produce",), ("pipelines",), ("check",)], ids=" ".join)
def test_each_new_command_prints_its_own_usage(command: tuple[str, ...], capsys) -> None:
    with pytest.raises(SystemExit) as done:
        parser().parse_args([*command, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: eosbatch {' '.join(command)} ")


def test_produce_takes_a_file_or_stdin_and_the_options() -> None:
    args = parser().parse_args(["produce", "orders", "-", "--key", "id", "--per-transaction", "10"])
    assert (args.topic, args.file, args.key_field, args.per_transaction) == ("orders", "-", "id", 10)
    args = parser().parse_args(["topic", "create", "orders", "--partitions", "3"])
    assert (args.name, args.partitions, args.replication_factor) == ("orders", 3, None)


def test_db_psql_keeps_the_password_out_of_the_arguments() -> None:
    settings = config.load({config.DATABASE_URL: "postgresql+psycopg2://app:s3cret@db.example:5433/prod?sslmode=require",
                            config.KAFKA_BOOTSTRAP: "k:9092"})
    argv, env = connection.psql_command(settings, command="SELECT 1")
    assert argv[0] == "psql" and argv[2:] == ["-v", "ON_ERROR_STOP=1", "-c", "SELECT 1"]
    assert sorted(argv[1].split()) == ["dbname=prod", "host=db.example", "port=5433", "sslmode=require", "user=app"]
    assert env == {"PGPASSWORD": "s3cret"} and "s3cret" not in " ".join(argv)
