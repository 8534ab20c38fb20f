"""The Airflow UI, as a user sees it in a real browser (headless Chromium, tests/orchestration/browser.py):
a backfill triggered from the DAG's form with its params, its mapped `batch` instances labelled with their
ranges, and a malformed param refused by the form with the reason.

The screenshots are the pictures of docs/airflow-ui.md: `EOSBATCH_UI_SCREENSHOTS=docs/img` writes them there.
"""

from __future__ import annotations

import os
import re
import time
import urllib.parse
from pathlib import Path

import pytest

from eosbatch.kafka.offsets import bounds
from eosbatch.ledger import store
from eosbatch.orchestration import local
from tests.orchestration import browser
from tests.orchestration.helpers import LocalAirflow
from tests.scenario import Scenario

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]
LABEL = re.compile(r"^batch (\d+)/(\d+): (.+)$")  # the `batch` instances' label (map_index_template)
FORM = ("css selector", '[data-scope="dialog"][data-part="content"]')  # the Trigger form's dialog
RANGES = ("id", "element_ranges")  # the form's field of the `ranges` param: one range a line
SUBMIT = browser.by_testid("trigger-dag-submit")
CONTENT = browser.by_testid("main-content")


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get(browser.SCREENSHOTS) or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_backfill_triggered_from_the_ui_form(scheduler: LocalAirflow, settings, screenshots: Path) -> None:
    """Open the backfill DAG of a pipeline started at the end of a topic with history. Its Trigger form takes
    the topic's whole ranges; the run succeeds; the grid's `batch` instances show each batch's ranges, as
    the ledger has them. Then the form refuses a malformed range, naming the param, and creates no run; and
    ranges with a time window, which the form accepts, fail the run's `plan` task, whose log names the rule."""
    browser.require_browser()
    started = time.monotonic()
    scenario = Scenario(settings, scheduler.suffixes["ui"], "latest", records=1500, batch=1000, start="latest")
    dag = f"eosbatch__{scenario.pipeline}__backfill"
    scheduler.wait_parsed(dag)  # left paused: the form's "Unpause on trigger" (checked by default) unpauses it
    ends = {tp.partition: b.stable for tp, b in bounds(settings, [scenario.input]).items()}
    ranges = [f"{scenario.input}:{p}:0-{end}" for p, end in sorted(ends.items())]
    malformed = f"{scenario.input}:0:0-x"

    with browser.chromium() as driver:
        page = f"http://127.0.0.1:{local.api_port()}/dags/{dag}"
        driver.get(page)
        open_trigger_form(driver)
        browser.type_text(driver, RANGES, "\n".join(ranges))
        browser.screenshot(driver, FORM, screenshots, "backfill-form")
        browser.clickable(driver, SUBMIT, what="the form's Trigger").click()
        # Accepted: the UI opens the new run's page.
        def run_page(d) -> str | None:
            path = urllib.parse.urlparse(d.current_url).path
            return path if path.startswith(f"/dags/{dag}/runs/") else None

        run_id = urllib.parse.unquote(browser.wait(driver, run_page, 30, "the new run's page").split("/")[4])
        [(conf,)] = scheduler.query("SELECT conf FROM dag_run WHERE dag_id = %s AND run_id = %s", (dag, run_id))
        assert (conf["ranges"], conf["mode"], conf["publish"]) == (ranges, "fill", None), conf

        def ended(d) -> str | None:  # the run's state in its header, once final
            state = d.find_element(*browser.by_testid("header-card")).find_element(*browser.by_testid("state-badge"))
            return state.text if state.text in ("Success", "Failed") else None

        state = browser.wait(driver, ended, 240, "the run to end (the page refreshes itself)")
        assert state == "Success", scheduler.timeline(dag, run_id)
        assert scheduler.run_state(dag, run_id) == "success"
        print(scheduler.timeline(dag, run_id))
        browser.screenshot(driver, CONTENT, screenshots, "backfill-run")

        # The grid: the run's `batch` cell opens its mapped instances, each labelled by map_index_template.
        browser.clickable(driver, browser.by_testid(f"grid-{run_id}-batch"), what="the grid's batch cell").click()
        batches = ledger_ranges(scenario)
        assert len(batches) == 2, batches  # 1,500 records (and their transaction markers), 1,000 a batch
        def labelled(d) -> list[str] | None:  # the Map Index column: the instances' labels
            found = [cell.text for cell in d.find_elements(*browser.by_testid("table-cell-rendered_map_index"))]
            return found if len(found) == len(batches) and all(found) else None

        labels = browser.wait(driver, labelled, 30, f"{len(batches)} labelled `batch` instances")
        shown = {}
        for label in labels:
            number, total, text = LABEL.match(" ".join(label.split())).groups()  # type: ignore[union-attr]
            assert int(total) == len(batches), label
            shown[int(number)] = sorted(text.split(", "))
        assert shown == {i + 1: ranges_of for i, ranges_of in enumerate(batches)}, (labels, batches)
        browser.unhover(driver, CONTENT)
        browser.screenshot(driver, CONTENT, screenshots, "backfill-batches")
        print("\n".join(f"  grid: {label}" for label in sorted(labels)))

        # Refused: Airflow checks the params against their JSON Schemas (eosbatch/orchestration/params.py)
        # when the run is created; the form shows the API's 400, naming the param and the value.
        driver.set_window_size(*browser.TALL)
        driver.get(page)
        open_trigger_form(driver)
        browser.type_text(driver, RANGES, malformed)
        browser.clickable(driver, SUBMIT, what="the form's Trigger").click()
        error = browser.visible(driver, browser.by_testid("error-alert"), what="the form's error").text
        assert "Invalid input for param ranges" in error and repr(malformed) in error, error
        assert [run for run, _ in scheduler.runs(dag)] == [run_id]  # no run for the refused params
        browser.screenshot(driver, FORM, screenshots, "backfill-refused")
        print(f"refused in the form: {error.splitlines()[1]}")

        # Accepted by the form, refused by the run: a rule across params (ranges *or* a window) is the
        # engine's; the `plan` task's dry run fails at once, without retries, and its log names the rule.
        driver.set_window_size(*browser.WINDOW)
        driver.get(page)  # a new form: the refusal's toast would cover its Trigger button
        open_trigger_form(driver)
        browser.type_text(driver, RANGES, ranges[0])
        browser.type_text(driver, ("id", "element_from"), "2026-11-01T00:00:00Z")
        browser.type_text(driver, ("id", "element_to"), "2026-11-02T00:00:00Z")
        before = scenario.batches()
        browser.clickable(driver, SUBMIT, what="the form's Trigger").click()
        both = urllib.parse.unquote(browser.wait(driver, run_page, 30, "the second run's page").split("/")[4])
        assert both != run_id and browser.wait(driver, ended, 240, "the second run to end") == "Failed"
        browser.clickable(driver, browser.by_testid(f"grid-{both}-plan"), what="the grid's plan cell").click()
        reason = browser.visible(driver, browser.by_testid("summary-ConfigError"), 60, what="plan's error in its log")
        assert "give offset ranges or --from/--to, not both" in reason.text, reason.text
        assert {task: state for task, (state, tries, _) in scheduler.tasks(dag, both).items()} == {
            "plan": "failed", "batch": "upstream_failed", "done": "upstream_failed"}
        assert scheduler.tasks(dag, both)["plan"][1] == 1  # one try: no retry of a bad request
        assert scenario.batches() == before  # the dry run changed nothing
        browser.unhover(driver, CONTENT)
        browser.screenshot(driver, CONTENT, screenshots, "backfill-plan-refused")
        print(f"refused by the plan task: {reason.text}")
    print(f"UI test: {time.monotonic() - started:.1f}s; screenshots in {screenshots}")


def open_trigger_form(driver) -> None:
    browser.clickable(driver, browser.by_testid("trigger-dag-button"), what="the DAG's Trigger button").click()
    browser.visible(driver, RANGES, what="the Trigger form's `ranges` field")


def ledger_ranges(scenario: Scenario) -> list[list[str]]:
    """The ranges of the scenario's batches, oldest first, as the ledger has them."""
    with store.transaction(scenario.settings) as cur:
        return [sorted(map(str, store.get_batch(cur, batch).ranges)) for batch, _, _ in scenario.batches()]
