"""The soak's use of the history checker (tests/history, issue 37 item 5): the totals pipeline's whole history
(ledger, output read_committed and read_uncommitted, dead letters, sink, input), its sink compared with its output
as an accumulate sink, every input record below the next offsets (the soak judges after the drain, caught up)."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit

from tests.history.checker import aborted_attempts, check
from tests.history.collect import Where, collect
from tests.scenario import Scenario


def libpq_url(url: str) -> str:
    """A SQLAlchemy URL naming its servers as `?host=h:p&host=h:p` (the stack's URL with a replica) in libpq's
    own multi-host form, `postgresql://user@h:p,h:p/db?...`, which the checker's psycopg2 connect takes; any
    other URL as it is."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query)
    hosts = [value for key, value in query if key == "host"]
    if parts.hostname or not hosts:
        return url
    rest = urlencode([(key, value) for key, value in query if key != "host"])
    user = parts.netloc.rstrip("@")
    return f"postgresql://{user + '@' if user else ''}{','.join(hosts)}{parts.path}" + (f"?{rest}" if rest else "")


def history_anomalies(scenario: Scenario) -> tuple[list[str], int]:
    """The checker's anomalies, and how many aborted attempts (Kafka transactions) the output's log holds."""
    settings = scenario.settings
    history = collect(scenario.pipeline, scenario.output, scenario.history_sink(),
                      Where(settings.kafka_bootstrap, libpq_url(settings.database_url), dict(settings.kafka_config)),
                      inputs=True)
    return [a.line() for a in check(history, caught_up=True)], len(aborted_attempts(history))
