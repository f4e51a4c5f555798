"""The live run page in a real browser (Debian's Chromium driven by playwright): a running run's page
shows its model call's tokens as they arrive, over server-sent events from the stream topic, before
the call ends; once the run has ended its page has no live panel and looks as before. A worker
subprocess runs tests/support/stream_apps.py, a sink in this process fills an embedded store, and
``agentlog ui`` serves it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from runtime.client import Client
from runtime.config import Settings
from support.browser import chromium
from support.services import make_deployment
from support.sink import InProcessSink
from support.ui_store import UiProcess, free_port
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration
expect.set_options(timeout=20_000)  # two cores shared with the rest of the suite

APP = "support.stream_apps:app"


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def _json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return dict(json.loads(answer.read()))


@pytest.fixture(scope="module")
def world(
    services: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, Path, str]]:
    deployment = make_deployment(services, partitions=1)
    where = tmp_path_factory.mktemp("ui-live")
    dsn = f"chdb://{where / 'store'}"
    worker = WorkerProcess(deployment, APP, "w1", where / "w1.log", TEST_STREAM_DIR=str(where))
    try:
        worker.wait_ready(1)
        with InProcessSink(deployment, dsn):
            ui = UiProcess(deployment, dsn, where / "ui.log", free_port())
            try:
                yield deployment, where, ui.url
            finally:
                ui.stop()
    finally:
        worker.stop()


@pytest.fixture
def page() -> Iterator[Page]:
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        yield context.new_page()
        context.close()


def test_the_live_run_page_shows_tokens_as_they_arrive_and_an_ended_run_looks_as_before(
    world: tuple[Settings, Path, str], page: Page
) -> None:
    deployment, where, url = world
    with Client(deployment) as client:
        run = client.submit("talk", {}).run_id
        wait_until(lambda: _status(f"{url}/run/{run}") == 200, 60, "the run in the store")
        page.goto(f"{url}/run/{run}")
        text = page.locator("#live .live-call .live-text").first
        expect(text).to_have_text("first try ")  # the model call waits: it has not ended
        assert "ModelCallCompleted" not in [e["type"] for e in client.run(run).history()]
        (where / f"release-{run}-1").touch()
        expect(text).to_have_text(f"first try of {run}")
        expect(page.locator("#live .live-note").last).to_have_text("run completed")
        assert client.run(run).result()["said"] == f"first try of {run}"
    wait_until(
        lambda: _json(f"{url}/run/{run}/version").get("status") == "completed", 60, "the end in the store"
    )
    page.reload()
    expect(page.locator("#run-main")).to_have_attribute("data-status", "completed")
    expect(page.locator("#live")).to_have_count(0)
