"""Asking before a destructive command: on a terminal the person answers; elsewhere (a script, Airflow) only
`--yes` lets it run, since nobody is there to answer."""

from __future__ import annotations

from collections.abc import Callable


def refusal(consequence: str, yes: bool, interactive: bool, ask: Callable[[str], str]) -> str | None:
    """None to go on; else why not, to print (the command then changes nothing).

    `consequence` says what the command deletes or moves, as a sentence without its full stop; `ask` puts a
    question and returns the answer (EOFError: no answer)."""
    if yes:
        return None
    if not interactive:
        return f"{consequence}; stdin is not a terminal, so nobody can confirm: give --yes to do it"
    try:
        answer = ask(f"{consequence}.\nType yes to go on: ")
    except EOFError:
        answer = ""
    if answer.strip().lower() in ("y", "yes"):
        return None
    return "not confirmed; nothing changed"
