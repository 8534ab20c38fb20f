"""Headless Chromium driven by Selenium, for the tests of the Airflow UI.

The browser and its driver are Debian's `chromium` and `chromium-driver` (scripts/setup.sh installs them).
Selenium is handed the driver's path, so it never runs Selenium Manager, which would download a browser;
SE_MANAGER_PATH names no file, so an accidental call fails instead of downloading.

Airflow 3's UI is a React app: every step waits for what it needs (WebDriverWait, with a deadline), and
elements are found by their data-testid, id or text, never by layout.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# Screenshots go here when set (the docs' pictures: docs/img), else into the test's temporary directory.
SCREENSHOTS = "EOSBATCH_UI_SCREENSHOTS"
WINDOW = (1440, 1300)  # tall enough for the whole trigger form, so its screenshot shows it all
TALL = (1440, 1800)  # and for the form with an error above it
T = TypeVar("T")


def require_browser() -> None:
    """Skip without the browser, or fail under CI=true (scripts/setup.sh installs it there)."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        reason = f"no {', '.join(missing)}: apt-get install chromium chromium-driver (scripts/setup.sh does)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and the browser is missing: {reason}", pytrace=False)
        pytest.skip(reason)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium session; quit on the way out."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_MANAGER_PATH"] = "/nonexistent/selenium-manager"  # never download: fail instead
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--window-size={WINDOW[0]},{WINDOW[1]}", "--force-device-scale-factor=1", "--lang=en-US"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: Any, condition: Callable[[Any], T | None], timeout: float, what: str) -> T:
    """`condition(driver)` once it is truthy, polled every 0.25 s; fails after `timeout` seconds naming `what`
    with the page's URL."""
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return cast(T, WebDriverWait(driver, timeout, poll_frequency=0.25,
                                     ignored_exceptions=(StaleElementReferenceException,)).until(condition))
    except TimeoutException:
        raise AssertionError(f"after {timeout:.0f}s, still waiting for {what} at {driver.current_url}") from None


def by_testid(testid: str) -> tuple[str, str]:
    from selenium.webdriver.common.by import By

    return By.CSS_SELECTOR, f'[data-testid="{testid}"]'


def visible(driver: Any, locator: tuple[str, str], timeout: float = 30, what: str = "") -> Any:
    from selenium.webdriver.support import expected_conditions

    return wait(driver, expected_conditions.visibility_of_element_located(locator), timeout, what or str(locator))


def clickable(driver: Any, locator: tuple[str, str], timeout: float = 30, what: str = "") -> Any:
    from selenium.webdriver.support import expected_conditions

    return wait(driver, expected_conditions.element_to_be_clickable(locator), timeout, what or str(locator))


def type_text(driver: Any, locator: tuple[str, str], text: str, timeout: float = 20) -> None:
    """Replace a field's text by typing it, as a user does, a line at a time. The form's fields are
    controlled by React: keystrokes sent while it renders the last ones can be lost (measured: the third
    line's newline or first letter of a three-line `ranges`, typed in one go). So each line, and each
    newline, is typed once the field holds everything before it; a field that went astray (or was replaced
    by a render) is found and typed again, until `timeout`."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    def typed(_: Any) -> bool:
        field = driver.find_element(*locator)
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys(Keys.DELETE)
        so_far = ""
        for number, line in enumerate(text.split("\n")):
            for keys, adds in ([(Keys.ENTER, "\n")] if number else []) + [(line, line)]:
                so_far += adds
                field.send_keys(keys)
                def landed(_: Any, expected: str = so_far) -> bool:
                    return field.get_attribute("value") == expected

                try:
                    WebDriverWait(driver, 2, poll_frequency=0.05).until(landed)
                except TimeoutException:
                    return False
        return True

    wait(driver, typed, timeout, f"the field {locator[1]!r} to hold {text!r}")


def screenshot(driver: Any, locator: tuple[str, str], folder: Path, name: str) -> Path:
    """The element's picture, as `folder/name.png`."""
    path = folder / f"{name}.png"
    driver.find_element(*locator).screenshot(str(path))
    return path


def unhover(driver: Any, locator: tuple[str, str], timeout: float = 10) -> None:
    """Move the pointer to the middle of an element (an empty part of the page) and wait until no tooltip of
    the element clicked last (the grid's cell: "Task ID: ...") is shown, so it is not in the screenshot."""
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).move_to_element(driver.find_element(*locator)).perform()
    tooltip = ("xpath", "//*[starts-with(normalize-space(.), 'Task ID:')]")
    wait(driver, lambda d: not any(e.is_displayed() for e in d.find_elements(*tooltip)), timeout, "no tooltip")
