"""A real browser for the UI tests: Debian's Chromium (``/usr/bin/chromium``, installed by `make setup` from infra/debian-packages.txt),
driven by playwright through ``executable_path`` -- playwright never downloads a browser here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, sync_playwright

CHROMIUM = Path(os.environ.get("AGENTLOG_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextmanager
def chromium() -> Iterator[Browser]:
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: `apt-get install -y chromium` (`make setup` does it)"
    manager = sync_playwright()
    driver = manager.start()
    # playwright writes files (screenshots) through its loop's default executor, whose threads are
    # started lazily and outlive a test (tests/conftest.py fails a test that leaves one behind).
    # One thread, started here at launch, serves them all; it ends with the driver.
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="playwright-io")
    manager._loop.set_default_executor(executor)
    executor.submit(lambda: None).result()
    try:
        browser = driver.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()
    finally:
        manager.__exit__(None, None, None)
        executor.shutdown(wait=True)
