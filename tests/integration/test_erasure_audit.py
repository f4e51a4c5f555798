"""The audit CLI and the UI open sealed contents on read, and show `erased` once the key is
destroyed -- against the real Kafka, registry and chDB, a real worker, `agentlog sink`,
`agentlog audit` and `agentlog erase` as subprocesses, and the UI's HTTP server.

One UI server serves before and after the erasure: a reader that had already opened a run's key
must notice its tombstone. The store stays sealed throughout: only the readers open it.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from analytics.diff import diff_runs
from analytics.store import connect
from runtime.client import Client
from runtime.config import Settings
from runtime.log.records.sealed_form import PREFIX
from support.sink import SinkProcess, agentlog, kafka_offsets, make_deployment, query, wait_for_rows
from support.ui_store import free_port
from support.wait import wait_until
from support.workers import WorkerProcess
from ui.server import UiServer

pytestmark = pytest.mark.integration

MARKER = "MARKER-audit-5e21c7"
STEP = 1  # the run's one model call opens step 1; its tool call belongs to it


@dataclass
class Sealed:
    settings: Settings
    dsn: str
    run_id: str
    twin_id: str
    sink: SinkProcess
    ui: UiServer
    tool_position: int
    model_position: int


def _calls_html(ui: UiServer, run_id: str) -> str:
    with urllib.request.urlopen(f"{ui.url}run/{run_id}/calls?step={STEP}", timeout=30) as response:
        return str(response.read().decode())


@pytest.fixture(scope="module")
def sealed(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sealed]:
    settings = make_deployment(services, partitions=2).model_copy(update={"seal_contents": True})
    tmp = tmp_path_factory.mktemp("erasure-audit")
    worker = WorkerProcess(settings, "support.erasure_apps:app", "w1", tmp / "worker.log")
    try:
        worker.wait_ready(2)
        with Client(settings) as client:
            run_id = client.submit("intake", {"note": MARKER}).run_id
            twin_id = client.submit(
                "intake", {"note": MARKER}
            ).run_id  # the same run again, under its own key
            assert client.run(run_id).result(timeout=60)["filed"] == MARKER
            assert client.run(twin_id).result(timeout=60)["filed"] == MARKER
    finally:
        worker.stop()
    dsn = f"chdb://{tmp}/store"
    sink = SinkProcess(settings, dsn, tmp / "sink.log")  # runs throughout: the readers ask its port
    ui = UiServer(settings, dsn, port=free_port())  # its opener's Kafka reader closes with it (stop)
    ui.start()
    try:
        total = sum(len(offsets) for offsets in kafka_offsets(settings).values())
        wait_for_rows(dsn, settings.events_topic, total, proc=sink.proc)
        positions = dict(
            query(
                dsn,
                "SELECT type, position FROM agentlog.events WHERE run_id = {r:String} "
                "AND type IN ('ToolCallScheduled', 'ModelCallScheduled')",
                {"r": run_id},
            ).rows
        )
        yield Sealed(
            settings,
            dsn,
            run_id,
            twin_id,
            sink,
            ui,
            int(positions["ToolCallScheduled"]),
            int(positions["ModelCallScheduled"]),
        )
    finally:
        ui.stop()
        assert sink.stop() == 0, sink.log_tail()


def _audit(s: Sealed, *args: str) -> tuple[int, str]:
    done = agentlog(s.settings, "audit", *args, "--dsn", s.dsn)
    return done.returncode, done.stdout + done.stderr


def _store_is_sealed(s: Sealed) -> None:
    args = query(
        s.dsn, "SELECT args FROM agentlog.tool_calls WHERE run_id = {r:String}", {"r": s.run_id}
    ).rows
    assert args and all(str(a).startswith(PREFIX) for (a,) in args)
    everything = query(s.dsn, "SELECT * FROM agentlog.events WHERE run_id = {r:String}", {"r": s.run_id}).rows
    assert MARKER not in repr(everything)


def test_audit_and_ui_read_a_sealed_run_then_show_it_erased(sealed: Sealed) -> None:
    s = sealed
    # Before erasure: the tool's argument, the prompt and the result, readable.
    code, tool = _audit(s, "call", s.run_id, str(s.tool_position), "--json")
    assert code == 0, tool
    found = json.loads(tool)
    assert found["args"] == {"customer": "c-42", "note": MARKER}
    assert found["result"] == {"customer": "c-42", "filed": MARKER}
    code, model = _audit(s, "call", s.run_id, str(s.model_position))
    assert code == 0, model  # the opened prompt matches its recorded args hash
    assert f"user: customer says: {MARKER}" in model and "verified: True" in model
    code, events = _audit(s, "run", s.run_id, "--json")
    assert code == 0 and MARKER in events and PREFIX not in events, events
    # Two runs alike: the same results once opened (sealed, each run's ciphertext differs).
    code, diffed = _audit(s, "diff", s.run_id, s.twin_id, "--json")
    assert code == 0 and json.loads(diffed)["identical"] is True, diffed
    with connect(s.dsn) as store:
        assert diff_runs(store, s.run_id, s.twin_id, s.settings.events_topic)["identical"] is False
    html = _calls_html(s.ui, s.run_id)
    assert MARKER in html and PREFIX not in html
    assert 'class="args"' in html and 'class="prompt"' in html
    _store_is_sealed(s)

    erased = agentlog(s.settings, "erase", "--run", s.run_id)
    assert erased.returncode == 0, erased.stderr + erased.stdout
    erased_at = time.monotonic()

    # After: the UI server had opened the key before: it looks the key up again and sees its tombstone.
    def erased_page() -> str | None:
        page = _calls_html(s.ui, s.run_id)
        return page if MARKER not in page else None

    html = wait_until(erased_page, 30, "the UI showing the erased run as erased", interval=0.2)
    shown_after = time.monotonic() - erased_at
    print(f"the UI showed the erasure {shown_after:.2f} s after `agentlog erase` returned")
    assert "erased" in html and MARKER not in html and PREFIX not in html
    assert 'class="args"' in html and "file_note" in html

    # The audit CLI: the same places show `erased`, never the text nor the ciphertext; structure stays.
    code, tool = _audit(s, "call", s.run_id, str(s.tool_position), "--json")
    assert code == 0, tool
    found = json.loads(tool)
    assert found["args"] == "erased" and found["result"] == "erased"
    assert found["tool"] == "file_note" and found["args_hash"] and found["attempts"] == 1
    code, model = _audit(s, "call", s.run_id, str(s.model_position))
    assert "user: erased" in model and MARKER not in model and PREFIX not in model, model
    assert code == 1 and "verified: False" in model  # the erased prompt no longer matches its hash
    assert "input_tokens: 120" in model
    code, events = _audit(s, "run", s.run_id, "--json")
    assert code == 0 and MARKER not in events and PREFIX not in events and "erased" in events
    code, diffed = _audit(s, "diff", s.run_id, s.twin_id, "--json")
    assert code == 0 and json.loads(diffed)["identical"] is False, diffed  # erased vs its twin's text
    code, twin = _audit(s, "call", s.twin_id, str(s.tool_position), "--json")
    assert code == 0 and json.loads(twin)["args"]["note"] == MARKER  # its own key: still readable

    _store_is_sealed(s)
