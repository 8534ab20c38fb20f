"""The CLI's conventions (pure): every command and action has its own help, `--version` names the installed
distribution, a usage error exits with the terminal code (never the transient one Airflow retries), and a
destructive command asks first, refusing without a terminal unless given --yes, having changed nothing."""

from __future__ import annotations

import io
from importlib import metadata

import pytest

from eosbatch import cli, commands, config, confirm
from eosbatch.cli_parser import EXIT_TERMINAL, EXIT_TRANSIENT, EXIT_USAGE, parser

pytestmark = pytest.mark.unit

COMMANDS = [("stack", "up"), ("stack", "down"), ("stack", "env"), ("stack", "status"), ("db", "upgrade"),
            ("db", "downgrade"), ("db", "current"), ("run",), ("status",), ("backfill",), ("replay",), ("ranges",),
            ("verify",), ("publish",), ("reset",), ("compact",), ("abort",), ("airflow", "up"),
            ("airflow", "down"), ("airflow", "status")]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_each_command_prints_its_own_usage(command: tuple[str, ...], capsys) -> None:
    with pytest.raises(SystemExit) as done:
        parser().parse_args([*command, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: eosbatch {' '.join(command)} ")


def test_the_options_are_in_the_help_of_their_command(capsys) -> None:
    for command, options in [(["stack", "up"], ["--spark-cluster"]), (["db", "downgrade"], ["--yes"]),
                             (["reset"], ["--dry-run", "--yes", "--partition"]), (["abort"], ["--dry-run"]),
                             (["stack", "status"], ["--json"])]:
        with pytest.raises(SystemExit):
            parser().parse_args([*command, "--help"])
        shown = capsys.readouterr().out
        assert all(option in shown for option in options), (command, shown)


def test_version_is_the_installed_distributions(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        parser().parse_args(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"eosbatch {metadata.version('eosbatch')}"


@pytest.mark.parametrize("argv", [[], ["nope"], ["stack"], ["stack", "sideways"], ["reset", "p", "--to", "1"],
                                  ["replay", "p", "not-a-number"], ["run", "p", "--max-batches", "x"],
                                  ["db", "downgrade", "base", "extra"]])
def test_a_usage_error_exits_with_the_terminal_code_never_the_transient_one(argv: list[str], capsys) -> None:
    assert EXIT_USAGE == EXIT_TERMINAL != EXIT_TRANSIENT
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    assert done.value.code == EXIT_USAGE
    assert "usage: eosbatch" in capsys.readouterr().err


def test_the_flags_parse() -> None:
    assert parser().parse_args(["db", "downgrade"]).revision == "base"
    assert parser().parse_args(["db", "upgrade"]).revision == "head"
    reset = parser().parse_args(["reset", "p", "--partition", "t:0", "--to", "5", "--dry-run", "--yes"])
    assert (reset.partitions, reset.to, reset.dry_run, reset.yes) == (["t:0"], "5", True, True)
    abort = parser().parse_args(["abort", "p", "7", "--dry-run"])
    assert (abort.batch_id, abort.dry_run) == (7, True)
    for argv in (["run", "p"], ["backfill", "p"], ["replay", "p", "1"], ["verify", "p"], ["stack", "status"],
                 ["status", "p"], ["ranges", "p"]):
        assert parser().parse_args([*argv, "--json"]).json is True
    assert parser().parse_args(["stack", "up", "--spark-cluster"]).spark_cluster is True
    assert parser().parse_args(["stack", "up"]).warm_up == 300_000  # a Connect server it starts is warmed
    assert parser().parse_args(["stack", "up", "--warm-up", "0"]).warm_up == 0


def test_a_negative_warm_up_fails_fast_naming_the_flag() -> None:
    with pytest.raises(config.ConfigError, match="--warm-up"):
        commands.stack_up(log=lambda _: None, warm_up_records=-1)


# ---------------------------------------------------------------- asking

def never_asked(*args: object, **kwargs: object) -> str:
    raise AssertionError(f"called with {args!r}")


def test_yes_goes_on_without_asking() -> None:
    assert confirm.refusal("this deletes X", yes=True, interactive=False, ask=never_asked) is None
    assert confirm.refusal("this deletes X", yes=True, interactive=True, ask=never_asked) is None


def test_without_a_terminal_it_refuses_naming_what_and_the_way_to_do_it() -> None:
    why = confirm.refusal("this deletes the schema eosbatch", yes=False, interactive=False, ask=never_asked)
    assert why is not None and "the schema eosbatch" in why and "--yes" in why and "not a terminal" in why


@pytest.mark.parametrize(("answer", "goes_on"), [("yes", True), ("y", True), (" YES\n", True), ("no", False),
                                                 ("", False), ("yess", False)])
def test_on_a_terminal_only_yes_goes_on(answer: str, goes_on: bool) -> None:
    asked: list[str] = []

    def ask(question: str) -> str:
        asked.append(question)
        return answer

    why = confirm.refusal("this deletes X", yes=False, interactive=True, ask=ask)
    assert (why is None) == goes_on
    assert len(asked) == 1 and "this deletes X" in asked[0]


def test_no_answer_at_all_is_no() -> None:
    def ask(question: str) -> str:
        raise EOFError

    assert confirm.refusal("this deletes X", yes=False, interactive=True, ask=ask) == "not confirmed; nothing changed"


def test_only_a_downgrade_to_base_deletes_and_it_names_the_database_without_its_password(monkeypatch) -> None:
    monkeypatch.setenv(config.DATABASE_URL, "postgresql+psycopg2://eos:secret@db:5432/ledger")
    monkeypatch.setenv(config.KAFKA_BOOTSTRAP, "broker:9092")
    assert commands.db_downgrade_deletes("0009") is None
    deletes = commands.db_downgrade_deletes("base")
    assert deletes is not None and "schema eosbatch" in deletes and "dead letters" in deletes
    assert "db:5432/ledger" in deletes and "secret" not in deletes


@pytest.fixture
def no_terminal(monkeypatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))


def test_downgrade_to_base_without_a_terminal_or_yes_changes_nothing(monkeypatch, no_terminal, capsys) -> None:
    monkeypatch.setattr(commands, "db_downgrade_deletes", lambda revision: "the ledger at db")
    monkeypatch.setattr(commands, "db_downgrade", never_asked)
    assert cli.main(["db", "downgrade"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "the ledger at db" in err and "--yes" in err


def test_downgrade_with_yes_or_to_a_revision_runs(monkeypatch, no_terminal, capsys) -> None:
    done: list[str] = []
    monkeypatch.setattr(commands, "db_downgrade_deletes", lambda revision: "X" if revision == "base" else None)
    monkeypatch.setattr(commands, "db_downgrade", lambda revision: done.append(revision))
    assert cli.main(["db", "downgrade", "--yes"]) == 0
    assert cli.main(["db", "downgrade", "0009"]) == 0
    assert done == ["base", "0009"]


def test_reset_without_a_terminal_or_yes_changes_nothing(monkeypatch, no_terminal, capsys) -> None:
    monkeypatch.setattr(commands, "reset", never_asked)
    assert cli.main(["reset", "p", "--partition", "orders:0", "--to", "5"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "orders:0" in err and "--yes" in err


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("answer", "done"), [("no", []), ("yes", ["base"])])
def test_on_a_terminal_downgrade_to_base_asks_naming_what_it_deletes(answer: str, done: list[str], monkeypatch,
                                                                       capsys) -> None:
    ran: list[str] = []
    asked: list[str] = []
    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("builtins.input", lambda question: asked.append(question) or answer)
    monkeypatch.setattr(commands, "db_downgrade_deletes", lambda revision: "the schema eosbatch in db")
    monkeypatch.setattr(commands, "db_downgrade", lambda revision: ran.append(revision))
    assert cli.main(["db", "downgrade"]) == (0 if done else cli.EXIT_USAGE)
    assert ran == done and len(asked) == 1 and "the schema eosbatch in db" in asked[0]


def test_on_a_terminal_reset_shows_the_dry_runs_moves_in_the_question_then_resets(monkeypatch, capsys) -> None:
    calls: list[bool] = []
    asked: list[str] = []
    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("builtins.input", lambda question: asked.append(question) or "yes")

    def reset(*args: object, dry_run: bool, **kwargs: object) -> list[str]:
        calls.append(dry_run)
        return ["orders:0: skipped 0-5 (incarnation 0)"]

    monkeypatch.setattr(commands, "reset", reset)
    assert cli.main(["reset", "p", "--partition", "orders:0", "--to", "5"]) == 0
    assert calls == [True, False]
    assert "orders:0: skipped 0-5" in asked[0]
