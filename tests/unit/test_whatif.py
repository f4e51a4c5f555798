"""agentlog whatif on the in-memory log, through the real worker, machine and client (no services):
which runs a changed prompt or model changes, the report, bad input refused, an interrupted what-if
resumed from the log. The same over Kafka with worker processes: tests/integration/test_whatif_over_kafka.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.log.records.events import ModelCallScheduled, RunStarted
from runtime.pricing import PriceTable, read_prices
from runtime.whatif import session
from runtime.whatif.change import Change, ChangeError, parse_change
from runtime.whatif.forks import fork_id
from runtime.whatif.histories import read_histories
from runtime.whatif.selection import Selection, SelectionError
from runtime.whatif.state import UnknownWhatif
from runtime.workflow.whatif_change import WhatifChange
from support.memory_worker import serving
from support.whatif_apps import STRICT, SYSTEM, app, app_v2, effects

pytestmark = pytest.mark.unit

V2 = "support.whatif_apps:app_v2"  # the next code version: it also emails after a refund

AMOUNTS = [40, 150, 60, 20, 300, 75, 90, 120, 10, 55, 80, 35]  # 150, 300 and 120 are over 100
PRICES = """model,from_date,input_per_million,output_per_million,cached_per_million
fake-planner-1,2024-01-01,2.00,8.00,1.00
fake-planner-2,2024-01-01,3.00,12.00,1.50
fake-writer-1,2024-01-01,1.00,4.00,0.50
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Client, list[str], str, PriceTable]]:
    tmp = tmp_path_factory.mktemp("whatif")
    db = str(tmp / "world.db")
    prices = tmp / "prices.csv"
    prices.write_text(PRICES)
    patch = pytest.MonkeyPatch()
    patch.setenv("WHATIF_WORLD_DB", db)
    try:
        with serving(app, Settings(partitions=2), whatif_apps={V2: app_v2}) as (client, _log):
            runs = [
                client.submit("refund", {"order": f"o{i}", "amount": a}).run_id for i, a in enumerate(AMOUNTS)
            ]
            client.results(runs, timeout=30)
            yield client, runs, db, PriceTable(read_prices(prices))
    finally:
        patch.undo()


def test_a_prompt_change_names_exactly_the_runs_whose_decisions_change(
    world: tuple[Client, list[str], str, PriceTable],
) -> None:
    client, runs, db, prices = world
    before = effects(db)
    assert len(before) == len(AMOUNTS)  # every original refunded
    prepared = session.prepare(
        client, Selection(workflow="refund"), parse_change([f"planner={STRICT}"], [], None)
    )
    assert [p.position for p in prepared.planned] == [2] * len(AMOUNTS)  # the planner's call: lookup is 1
    report = session.start(client, prepared, session.Options(prices=prices))

    over = {runs[i] for i, a in enumerate(AMOUNTS) if a > 100}
    assert {r.origin for r in report.changed} == over
    for row in report.changed:
        assert row.first_difference is not None
        assert row.first_difference["position"] == 3
        assert row.first_difference["original"].startswith('refund({"amount": ')
        assert row.first_difference["whatif"].startswith('create_ticket({"order": ')
        assert row.whatif is not None and [c.tool for c in row.whatif.would_have_called] == ["create_ticket"]
    assert [t.describe() for t in report.tools] == ["create_ticket: 3 more", "refund: 3 of 12 no longer made"]
    # The priced difference of the calls made: each planner call's prompt is its system text.
    expected = len(AMOUNTS) * (len(STRICT) - len(SYSTEM)) * 2e-6
    assert report.cost_delta_usd == pytest.approx(expected)
    assert report.whatif_tokens - report.original_tokens == len(AMOUNTS) * (len(STRICT) - len(SYSTEM))
    assert effects(db) == before  # nothing in the world touched
    # Every what-if run is marked, and its model call was made with the new prompt.
    histories = read_histories(client, [fork_id(prepared.whatif_id, r) for r in runs])
    for events in histories.values():
        started = next(e for e in events if isinstance(e, RunStarted))
        assert started.whatif == prepared.whatif_id and started.fork_overrides is not None
    prompts = client.run(fork_id(prepared.whatif_id, runs[1])).prompts()
    assert prompts[2].messages[0]["content"] == STRICT
    # The report again, from the log alone.
    again = session.report(client, prepared.whatif_id, prices)
    assert [r.state for r in again.rows] == [r.state for r in report.rows]
    assert again.cost_delta_usd == pytest.approx(expected)


def test_a_model_change_is_called_in_place_of_the_old_one(
    world: tuple[Client, list[str], str, PriceTable],
) -> None:
    client, runs, db, prices = world
    before = effects(db)
    picked = runs[:3]  # amounts 40, 150, 60
    prepared = session.prepare(
        client, Selection(run_ids=tuple(picked)), parse_change([], ["planner=planner-strict"], None), app
    )
    report = session.start(client, prepared, session.Options(prices=prices))
    assert [r.origin for r in report.changed] == [runs[1]]
    history = read_histories(client, [fork_id(prepared.whatif_id, runs[1])])[
        fork_id(prepared.whatif_id, runs[1])
    ]
    assert [e.model for e in history if isinstance(e, ModelCallScheduled)] == ["planner-strict", "writer"]
    # planner -> planner-strict on three runs: each call priced at the other model's prices.
    old = (len(SYSTEM) * 2 + 3 * 8) * 1e-6
    new = (len(STRICT) * 3 + 3 * 12) * 1e-6
    assert report.cost_delta_usd == pytest.approx(3 * (new - old))
    assert effects(db) == before


def test_bad_input_is_refused_before_any_fork(world: tuple[Client, list[str], str, PriceTable]) -> None:
    client, runs, _db, _prices = world
    change = parse_change(["planner=x"], [], None)
    with pytest.raises(SelectionError, match=r"unknown run ids .*: nope"):
        session.prepare(client, Selection(run_ids=(runs[0], "nope")), change)
    with pytest.raises(SelectionError, match="no recorded run used workflow 'payments'"):
        session.prepare(client, Selection(workflow="payments"), change)
    with pytest.raises(ChangeError, match="never called model 'chat'"):
        session.prepare(client, Selection(workflow="refund"), parse_change(["chat=hello"], [], None))
    with pytest.raises(UnknownWhatif, match="no what-if 'nothere'"):
        session.report(client, "nothere")
    with pytest.raises(ChangeError, match="NAME=VALUE"):
        parse_change(["planner"], [], None)
    with pytest.raises(ChangeError, match="nothing to change"):
        parse_change([], [], None)
    with pytest.raises(ChangeError, match="cannot read the file"):
        parse_change(["planner=@/no/such/prompt.txt"], [], None)


def test_an_interrupted_whatif_is_reported_as_far_as_it_got_then_resumed(
    world: tuple[Client, list[str], str, PriceTable], tmp_path: Path
) -> None:
    client, runs, _db, prices = world
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(STRICT)
    prepared = session.prepare(
        client, Selection(run_ids=tuple(runs[:4])), parse_change([f"planner=@{prompt}"], [], None)
    )
    # Interrupted once its first two forks have ended, one at a time (a process stopped there).
    ended: list[str] = []

    def stop_after_two(run_id: str) -> None:
        ended.append(run_id)
        if len(ended) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        session.start(client, prepared, session.Options(window=1, progress=stop_after_two))
    partial = session.report(client, prepared.whatif_id, prices)
    assert [r.state for r in partial.rows] == ["unchanged", "changed", "pending", "pending"]
    assert "2 of 4 not yet replayed" in partial.summary()
    done = session.resume(client, prepared.whatif_id, session.Options(prices=prices))
    assert [r.state for r in done.rows] == ["unchanged", "changed", "unchanged", "unchanged"]


def test_a_whatif_change_applies_from_the_fork_position_only() -> None:
    change = Change({"planner": "planner-v2"}, {"planner": "new"}).for_run("w1", 0, ["a", "b"])
    assert WhatifChange.from_json(change.to_json()) == change
    name, messages = change.applied(
        "planner", [{"role": "system", "content": "old"}, {"role": "user", "content": "q"}]
    )
    assert (name, messages[0]["content"], messages[1]["content"]) == ("planner-v2", "new", "q")
    assert change.applied("writer", [{"role": "user", "content": "q"}]) == (
        "writer",
        [{"role": "user", "content": "q"}],
    )
    # A prompt for a model whose calls have no system message puts one first.
    assert change.applied("planner", [{"role": "user", "content": "q"}])[1][0] == {
        "role": "system",
        "content": "new",
    }


def test_new_code_that_adds_an_effect_records_it_as_would_have_called(
    world: tuple[Client, list[str], str, PriceTable],
) -> None:
    client, runs, db, _prices = world
    before = effects(db)
    picked = runs[:3]  # amounts 40, 150, 60: all refunded
    prepared = session.prepare(client, Selection(run_ids=tuple(picked)), parse_change([], [], V2), app_v2)
    assert [p.position for p in prepared.planned] == [1, 1, 1]  # new code: from the start
    report = session.start(client, prepared, session.Options())
    assert [r.state for r in report.rows] == ["changed"] * 3
    for row in report.rows:
        assert row.first_difference is not None
        assert row.first_difference["original"] == "no further tool call"
        assert row.first_difference["whatif"].startswith('send_email({"order": ')
        assert row.whatif is not None
        assert [c.tool for c in row.whatif.would_have_called] == ["refund", "send_email"]
    assert [t.describe() for t in report.tools] == ["send_email: 3 more"]
    assert effects(db) == before  # neither the refund again nor the new email


def test_code_that_lacks_the_runs_workflow_or_a_version_the_worker_lacks_is_refused(
    world: tuple[Client, list[str], str, PriceTable],
) -> None:
    client, runs, _db, _prices = world
    from runtime import App

    with pytest.raises(ChangeError, match="does not register workflow 'refund'"):
        session.prepare(client, Selection(run_ids=(runs[0],)), parse_change([], [], "x:empty"), App("empty"))
    with pytest.raises(ChangeError, match=r"'planner-9' that the code support\.whatif_apps:app_v2 does not"):
        session.prepare(
            client, Selection(run_ids=(runs[0],)), parse_change([], ["planner=planner-9"], V2), app_v2
        )
    # --model OLD=NEW of the code the workers run: NEW checked against it, before any fork.
    with pytest.raises(ChangeError) as refused:
        session.prepare(
            client, Selection(run_ids=(runs[0],)), parse_change([], ["planner=planner-9"], None), app
        )
    assert str(refused.value) == (
        "--model names model 'planner-9' that the code the workers run does not register "
        "(it registers: planner, planner-slow, planner-strict, writer)"
    )
    with pytest.raises(ChangeError, match="needs the code to check NEW against: --workers-app"):
        session.prepare(
            client, Selection(run_ids=(runs[0],)), parse_change([], ["planner=planner-strict"], None)
        )
    # A version the worker was not started with: its forks are refused, and the report says why.
    prepared = session.prepare(
        client, Selection(run_ids=(runs[0],)), parse_change([], [], "support.whatif_apps:app"), app
    )
    report = session.start(client, prepared, session.Options())
    (row,) = report.rows
    assert row.whatif is not None and row.whatif.status == "rejected"
    assert "what-if code version 'support.whatif_apps:app' is not held by this worker" in str(
        row.whatif.result
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["whatif", "--prompt", "planner=x"], "name the runs: run ids, or --workflow NAME"),
        (["whatif", "--workflow", "refund"], "nothing to change"),
        (["whatif", "r1", "--model", "planner"], "--model must look like NAME=VALUE, got 'planner'"),
        (["whatif", "r1", "--app", "no_such_module_xyz:app"], "no module named 'no_such_module_xyz'"),
        (
            ["whatif", "r1", "--app", "support.whatif_apps:SYSTEM"],
            "support.whatif_apps:SYSTEM is not an agentlog App",
        ),
        (
            ["whatif", "r1", "--model", "planner=planner-9", "--workers-app", "support.whatif_apps:app"],
            "--model names model 'planner-9' that the code the workers run does not register "
            "(it registers: planner, planner-slow, planner-strict, writer)",
        ),
        (
            ["whatif", "r1", "--model", "planner=planner-strict"],
            "--model OLD=NEW needs the code to check NEW against: --workers-app module:app",
        ),
        (
            ["whatif", "--resume", "w1", "--prompt", "planner=x"],
            "--resume and --report take a what-if id only",
        ),
        (
            ["whatif", "r1", "--since", "yesterday", "--prompt", "p=x"],
            "--since 'yesterday' is not an ISO 8601",
        ),
    ],
)
def test_the_command_refuses_bad_input_in_one_line_before_connecting(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from runtime.cli.main import main

    assert main(argv) == 1
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err


def _started(change: WhatifChange | None) -> RunStarted:
    return RunStarted(
        run_id="r1.whatif.w1",
        seq=1,
        occurred_at=1,
        workflow="refund",
        input='{"order": "o1", "amount": 5}',
        command_offset=0,
        reset_position=1,
        fork_overrides="{}",
        whatif=None if change is None else change.whatif_id,
        whatif_change=None if change is None else change.to_json(),
    )


def test_a_worker_runs_a_whatif_with_its_code_version_only_if_it_holds_it() -> None:
    from typing import Any

    from runtime.errors import AgentlogError
    from runtime.worker.versions import CodeVersions
    from runtime.workflow.intents import Stamp

    class Built:  # what the worker's new_run returns, and the code it was built with
        def __init__(self, app: Any) -> None:
            self.app = app

    def build(app: Any, started: RunStarted, stamp: Stamp, *, history_warn_events: int) -> Any:
        return Built(app)

    versions = CodeVersions(app, {V2: app_v2})
    stamp = Stamp(lambda: 1, "w", 1)
    runs = {
        name: versions.new_run(_started(change), stamp, build, history_warn_events=100)
        for name, change in (
            ("plain", None),
            ("new code", Change(app=V2).for_run("w1", 0)),
            ("prompt", Change(prompts={"planner": "x"}).for_run("w1", 0)),
        )
    }
    assert {name: run.app for name, run in runs.items()} == {"plain": app, "new code": app_v2, "prompt": app}
    # Its tools and models are called with the code it was built with.
    assert {name: versions.of(run) for name, run in runs.items()} == {
        "plain": app,
        "new code": app_v2,
        "prompt": app,
    }
    with pytest.raises(
        AgentlogError, match=r"code version 'other:app' is not held by this worker \(start it with"
    ):
        CodeVersions(app).app_for(_started(Change(app="other:app").for_run("w1", 0)))


def test_a_run_that_cannot_be_cut_where_the_change_starts_is_refused_before_any_fork() -> None:
    from runtime.log.records.events import ToolCallScheduled
    from runtime.whatif.forks import plan

    # A lookup scheduled with no outcome recorded (its worker died, the run failed), then the planner.
    history = [
        _started(None),
        ToolCallScheduled(
            run_id="r1", seq=2, occurred_at=2, position=1, tool="lookup", args_hash="h", args="{}"
        ),
        ModelCallScheduled(run_id="r1", seq=3, occurred_at=3, position=2, model="planner", args_hash="h"),
    ]
    with pytest.raises(
        ChangeError, match=r"run r1 cannot be forked at position 2: position 2 is not a clean seam"
    ):
        plan(Change(prompts={"planner": "x"}), ["r1"], {"r1": history})


def test_a_whatif_holds_at_most_its_window_of_runs_in_the_workers(
    world: tuple[Client, list[str], str, PriceTable],
) -> None:
    """What keeps a what-if from crowding out production runs: fork i + window starts only once
    fork i has ended, so the workers never hold more than the window of its runs at once."""
    from runtime.log.records.status import has_ended, status_after

    client, runs, _db, _prices = world
    prepared = session.prepare(
        client, Selection(run_ids=tuple(runs)), parse_change(["planner=terse"], [], None)
    )
    session.start(client, prepared, session.Options(window=3))
    forks = [fork_id(prepared.whatif_id, r) for r in runs]
    histories = read_histories(client, forks)
    started = [next(e.occurred_at for e in histories[f] if isinstance(e, RunStarted)) for f in forks]
    ended = [
        next(e.occurred_at for e in histories[f] if has_ended(status_after(e.type, "running"))) for f in forks
    ]
    assert all(started[i + 3] >= ended[i] for i in range(len(forks) - 3))
    # ... and it did run three at once: the window is used, not one fork after another.
    assert any(started[i + 1] < ended[i] for i in range(len(forks) - 1))
