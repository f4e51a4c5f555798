"""``agentlog worker | submit | status | history | signal | cancel | reset | replay-check``: thin layers
over Worker, Client and Replayer."""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import importlib.util
import json
import logging
import sys
import time
from typing import TYPE_CHECKING, Any

from runtime import stagemarks
from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.workflow.app import App
from runtime.workflow.budget import Budget

if TYPE_CHECKING:
    from runtime.client import Client, RunHandle
    from runtime.log.kafka.backend import KafkaLog
    from runtime.log.port.protocol import CommandFeed
    from runtime.log.schemas.serde import Serde


def _client(settings: Settings, identity: str = "client") -> Client:
    from runtime.client import Client

    return Client(settings, identity=identity)


def _app_module(spec: str) -> tuple[str, str]:
    """``module:attr`` split, once the module is known to exist (``find_spec`` imports only its
    parent packages), so that a mistyped ``--app`` fails before a worker joins its group."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise AgentlogError(f"--app must look like module:attribute, got {spec!r}")
    if "." not in sys.path:
        sys.path.insert(0, ".")  # the app is imported from the working directory
    try:
        found = importlib.util.find_spec(module_name)
    except ImportError as exc:  # a parent package is missing
        raise AgentlogError(f"--app {spec}: cannot import {module_name}: {exc}") from exc
    if found is None:
        raise AgentlogError(f"--app {spec}: no module named {module_name!r}")
    return module_name, attr


def load_app(spec: str) -> App:
    """``module:attr`` -> the App object (the module is imported from the working directory)."""
    module_name, attr = _app_module(spec)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # a missing name; other errors inside the user's code propagate
        raise AgentlogError(f"--app {spec}: cannot import {module_name}: {exc}") from exc
    app = getattr(module, attr, None)
    if not isinstance(app, App):
        raise AgentlogError(f"{spec} is not an agentlog App")
    return app


def _worker(args: argparse.Namespace, settings: Settings) -> int:
    import gc
    import socket

    worker_id = args.worker_id or socket.gethostname()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr
    )
    _check_price_table(settings)
    if args.respawn:
        return _supervised_worker(args, settings, worker_id)
    # What start-up allocates lives as long as the process (modules, classes, schemas): the cyclic
    # collector would walk it ~30 times on the way (~7 ms of a restarted worker's recovery).
    # Worker.run(tune_gc=True) freezes it and turns collection back on.
    gc.disable()
    from runtime.log.kafka.access import check_access
    from runtime.log.kafka.backend import KafkaLog
    from runtime.log.kafka.openness import say_if_open

    _app_module(args.app)
    check_access(settings, "worker")  # a user without the worker's permissions: one line, now
    say_if_open(settings)  # a cluster where anyone may write the events topic: one line, meanwhile
    stagemarks.start("access checked")
    # Join the group first: the join runs in librdkafka's threads while the rest is imported.
    log = KafkaLog(settings)
    feed = log.join(worker_id, args.session_timeout_ms)
    # And the producer, connected while the rest is imported (the claims are its first records).
    log.connect()
    stagemarks.start("join and connect started")
    _serve(args, settings, worker_id, log, feed)
    return 0


def _check_price_table(settings: Settings) -> None:
    """A price table that does not parse refuses the worker's start, naming the row, before it joins
    its group (the worker reads it again when it builds its budgets: runtime.worker.budgets)."""
    if settings.price_table is not None:
        from runtime.pricing import read_prices

        read_prices(settings.price_table)


def _serve(
    args: argparse.Namespace,
    settings: Settings,
    worker_id: str,
    log: KafkaLog,
    feed: CommandFeed,
    serde: Serde | None = None,
) -> None:
    from runtime.log.schemas.serde import Serde

    if serde is None:
        # Resolve the schema ids in a thread (network waits) while the app is imported.
        serde = Serde(settings)
        serde.warm_up_in_background()
    from runtime.log.kafka.stream import StreamProducer
    from runtime.worker.loop import Worker

    stagemarks.start("worker imported")
    try:
        app = load_app(args.app)
    except BaseException:
        feed.close()  # leave the group at once: the partitions go to another worker
        log.close()
        raise
    stagemarks.start("app loaded")
    log.connect()  # the reader is connected before partitions arrive: rebuilds read with it
    halt_scheduler = None
    if args.schedules:  # docs/schedules.md: a scheduler beside the worker, in a thread of its own
        from runtime.cli.scheduling import start_beside_worker

        halt_scheduler = start_beside_worker(settings, worker_id, set(app.workflows))
    try:
        worker = Worker(
            app,
            settings,
            log=log,
            serde=serde,
            worker_id=worker_id,
            session_timeout_ms=args.session_timeout_ms,  # a rejoin after fencing joins as the first did
            feed=feed,
            # what runs do, for watchers (runtime.worker.streaming)
            stream=StreamProducer(settings) if settings.stream_runs else None,
            whatif_apps={spec: load_app(spec) for spec in args.whatif_app or ()},  # agentlog whatif --app
        )
        stagemarks.start("worker built")
        worker.run(tune_gc=True)
    finally:
        if halt_scheduler is not None:
            halt_scheduler()
        log.close()


def _supervised_worker(args: argparse.Namespace, settings: Settings, worker_id: str) -> int:
    """Import everything once, then fork the worker -- again at once if it dies (see
    runtime.worker.supervisor): a respawned worker starts with its modules loaded and its schema ids
    resolved."""
    import uvloop  # noqa: F401  -- Worker.run's loop: imported here, not in each respawned child

    from runtime.log.kafka.backend import KafkaLog
    from runtime.log.schemas import registry_client as _registry  # noqa: F401  -- imported before the fork, on purpose
    from runtime.log.schemas.serde import Serde
    from runtime.worker import loop as _worker_module  # noqa: F401
    from runtime.worker.supervisor import supervise

    load_app(args.app)
    # Refused credentials, or a user without the worker's permissions, end the supervisor here,
    # instead of every fork failing the same way.
    from runtime.log.kafka.access import check_access
    from runtime.log.kafka.openness import say_if_open

    check_access(settings, "worker")  # its connections are closed before any fork
    say_if_open(settings).join(15)  # said once, by the supervisor, before any fork
    # The ids are resolved over a connection closed before any fork (Serde.warm_up).
    serde = Serde(settings)
    serde.warm_up()

    def child() -> int:
        stagemarks.start("forked")
        log = KafkaLog(settings)
        feed = log.join(worker_id, args.session_timeout_ms)
        log.connect()  # its ProducerId is acquired while the group is joined (see _worker)
        stagemarks.start("join and connect started")
        _serve(args, settings, worker_id, log, feed, serde)
        return 0

    return supervise(child)


def _submit(args: argparse.Namespace, settings: Settings) -> int:
    # Checked before anything connects: a typo in --input is the user's to fix now, not a run the
    # worker rejects later (that visible rejection stays for records other producers write).
    value = _json_option("--input", args.input)
    budget = _budget(args)  # a budget that cannot hold is refused here, naming the field
    deadline = None if args.deadline is None else deadline_option(args.deadline)
    with _client(settings, "cli") as client:
        return _print_run(
            client,
            client.submit(args.workflow, value, run_id=args.run_id, budget=budget, deadline=deadline),
            args,
        )


def _budget(args: argparse.Namespace) -> Budget | None:
    """``--max-cost``, ``--max-tokens``, ``--max-model-calls``: the run's budget, if any is given."""
    limits = {
        "max_cost": args.max_cost,
        "max_tokens": args.max_tokens,
        "max_model_calls": args.max_model_calls,
    }
    if all(value is None for value in limits.values()):
        return None
    return Budget(**limits, on_exceeded=args.on_budget_exceeded)


def _print_run(client: Client, run: RunHandle, args: argparse.Namespace) -> int:
    """The run id; with ``--wait``, the result as JSON, or the reason (exit 1) if it did not complete."""
    from runtime.client import RunError

    client.flush()
    if not args.wait:
        print(run.run_id)
        return 0
    try:
        print(json.dumps(run.result(timeout=args.timeout)))
    except RunError as error:
        print(f"agentlog: {error}", file=sys.stderr)
        return 1
    return 0


def _reset(args: argparse.Namespace, settings: Settings) -> int:
    with _client(settings, "cli") as client:
        new = client.run(args.run).reset(args.to, new_id=args.run_id, allow_in_doubt=args.allow_in_doubt)
        return _print_run(client, new, args)


def _override(text: str) -> tuple[str, Any]:
    """``--set key=value``: the value as JSON when it parses (numbers, true, objects), else as text."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected key=value, e.g. model=planner-v2")
    try:
        return key.strip(), json.loads(value)
    except json.JSONDecodeError:
        return key.strip(), value


def _fork(args: argparse.Namespace, settings: Settings) -> int:
    with _client(settings, "cli") as client:
        new = client.run(args.run).fork(args.at, dict(args.set or []), new_id=args.run_id)
        return _print_run(client, new, args)


def _status(args: argparse.Namespace, settings: Settings) -> int:
    status = _client(settings).run(args.run).status()
    if args.json:
        print(status.to_json())
        return 0
    print(f"run       {status.run_id}\nworkflow  {status.workflow}\nstatus    {status.status}")
    print(f"events    {status.events}\nbytes     {status.bytes}")
    if status.reason:
        print(f"reason    {status.reason}")
    if status.budget:
        print(f"budget    {status.budget.describe()}")
    for call in status.in_doubt:
        print(f"in doubt  {call.kind} {call.name!r} at position {call.position} key={call.idempotency_key}")
    for wait in status.retrying:
        print(f"retrying  {wait.describe(int(time.time() * 1000))}")
    for undo in status.compensations:
        print(
            f"compensation  {undo.tool!r} at position {undo.position} undoes position {undo.compensates}: "
            f"{undo.state} key={undo.idempotency_key}"
        )
    if status.forked_from:
        print(f"fork      {status.forked_from.describe()}")
    elif status.reset_from:
        print(f"reset     from {status.reset_from.run_id} at position {status.reset_from.position}")
    if status.continued_from:
        print(f"continued from {status.continued_from}")
    if status.continued_as:
        print(f"continued as   {status.continued_as}")
    if status.parent_run_id:
        print(f"parent    {status.parent_run_id}")
    for child in status.children:
        print(f"child     {child.describe()}")
    for entry in status.redecided:
        print(f"redecided at position {entry.position}: {entry.reason}")
    for drift in status.drift:
        print(f"drift     {drift.describe()}")
    now_ms = int(time.time() * 1000)
    for permit in status.waiting_for:
        print(f"waiting   {permit.describe(now_ms).removeprefix('waiting ')}")
    for beat in status.heartbeats:
        print(f"heartbeat {beat.describe(now_ms)}")
    for forged in status.forged:  # read with the verify key: no worker wrote it, left out above
        print(f"FORGED    {forged}")
    return 0 if status.status != "unknown" else 1


_SEQUENCE_FIELDS = {"message_slots", "new_roles", "new_messages"}


def _history(args: argparse.Namespace, settings: Settings) -> int:
    events = _client(settings).run(args.run).history(payloads=args.payloads)
    if args.json:
        print(json.dumps(events))
        return 0
    # With --payloads a model call shows its prompt (``messages``), not the sequence ranges.
    hidden = {"seq", "type", "run_id", "partition", "offset", "schema_version"}
    for event in events:
        omit = hidden | (_SEQUENCE_FIELDS if "messages" in event else set())
        fields = {k: v for k, v in event.items() if k not in omit}
        print(f"{event['seq']:>5}  {event['type']:<24} {json.dumps(fields)}")
    return 0


def _signal(args: argparse.Namespace, settings: Settings) -> int:
    with _client(settings, "cli") as client:
        client.run(args.run).signal(args.name, _json_option("--payload", args.payload))
    return 0


def deadline_option(text: str) -> dt.datetime | float:
    """``--deadline``: seconds from now, or an ISO 8601 time (checked when the client submits)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        raise AgentlogError(
            f"--deadline {text!r} is neither seconds nor an ISO 8601 time (e.g. 2026-12-05T09:00:00+00:00)"
        ) from None


def _json_option(option: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise AgentlogError(f"{option} is not JSON: {exc}") from exc


def _cancel(args: argparse.Namespace, settings: Settings) -> int:
    with _client(settings, "cli") as client:
        client.run(args.run).cancel(args.reason)
    return 0


def _replay_check(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from runtime.replay.replayer import Replayer, history_from_json, load_history

    replayer = Replayer(app=load_app(args.app), raise_on_replay_failure=False)
    histories = [load_history(Path(f)) for f in args.file]
    histories += [history_from_json(_client(settings).run(run).history(payloads=True)) for run in args.runs]
    failed = 0
    for history in histories:
        result = replayer.replay(history)
        verdict = "ok" if result.ok else f"NON-DETERMINISTIC: {result.divergence}"
        print(f"{result.run_id}  {result.workflow}  {result.events_replayed} events  {verdict}")
        failed += not result.ok
    return 1 if failed else 0


def add_metrics_port(parser: argparse.ArgumentParser) -> None:
    """``--metrics-port`` (setting ``metrics_port``): /metrics, /healthz and /readyz (runtime.ops)."""
    parser.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus /metrics, /healthz and /readyz on this port (0: a free one, logged; "
        "env AGENTLOG_METRICS_PORT)",
    )


def add_run_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    worker = subparsers.add_parser("worker", help="run a worker")
    worker.add_argument("--app", required=True, help="module:attribute of the App")
    worker.add_argument("--worker-id", help="stable identity (static group membership); default: host name")
    worker.add_argument(
        "--schedules", action="store_true", help="also fire the schedules, as `agentlog scheduler` does"
    )
    worker.add_argument("--session-timeout-ms", type=int, default=10_000)
    worker.add_argument(
        "--whatif-app",
        action="append",
        metavar="MODULE:APP",
        help="a new code version this worker also runs what-ifs of (agentlog whatif --app); repeatable",
    )
    worker.add_argument(
        "--respawn",
        action="store_true",
        help="run the worker in a forked child and fork a new one at once if it dies",
    )
    add_metrics_port(worker)
    worker.set_defaults(func=_worker)

    submit = subparsers.add_parser("submit", help="submit a run")
    submit.add_argument("workflow")
    submit.add_argument("--input", required=True, help="workflow input as JSON")
    submit.add_argument("--run-id")
    submit.add_argument("--wait", action="store_true", help="wait and print the result as JSON")
    submit.add_argument("--timeout", type=float, default=60.0)
    submit.add_argument("--max-cost", type=float, help="the run's budget: USD its model calls may cost")
    submit.add_argument("--max-tokens", type=int, help="the run's budget: tokens its model calls may use")
    submit.add_argument("--max-model-calls", type=int, help="the run's budget: model calls it may make")
    submit.add_argument(
        "--on-budget-exceeded",
        choices=("fail", "park"),
        default="fail",
        help="what the run does when a model call would exceed its budget",
    )
    submit.add_argument(
        "--deadline",
        help="cancel the run if it has not ended by then: seconds from now (e.g. 300) or an ISO 8601 "
        "time with its timezone (e.g. 2026-12-05T09:00:00+00:00)",
    )
    submit.set_defaults(func=_submit)

    for name, func, text in (
        ("status", _status, "a run's status"),
        ("history", _history, "a run's events, from Kafka"),
    ):
        sub = subparsers.add_parser(name, help=text)
        sub.add_argument("run")
        sub.add_argument("--json", action="store_true")
        if name == "history":
            sub.add_argument(
                "--payloads",
                action="store_true",
                help="show results stored out of line, read back, and each model call's whole prompt",
            )
        sub.set_defaults(func=func)

    signal = subparsers.add_parser("signal", help="send a signal to a run")
    signal.add_argument("run")
    signal.add_argument("name")
    signal.add_argument("--payload", default="null", help="JSON payload")
    signal.set_defaults(func=_signal)

    check = subparsers.add_parser("replay-check", help="replay recorded runs against the current code")
    check.add_argument("--app", required=True, help="module:attribute of the App")
    check.add_argument("--file", action="append", default=[], help="a history saved with `history --json`")
    check.add_argument("runs", nargs="*", help="run ids to fetch from Kafka")
    check.set_defaults(func=_replay_check)

    reset = subparsers.add_parser(
        "reset", help="a new run from a run's history before a position (the original is cancelled)"
    )
    reset.add_argument("run")
    reset.add_argument("--to", type=int, required=True, help="first position to execute again (1-based)")
    reset.add_argument("--run-id", help="the new run's id (default: a fresh one)")
    reset.add_argument(
        "--allow-in-doubt",
        action="store_true",
        help="cut between a call's Scheduled record and its outcome anyway: the new run executes it "
        "again, in doubt (its status names it)",
    )
    reset.add_argument("--wait", action="store_true", help="wait and print the new run's result as JSON")
    reset.add_argument("--timeout", type=float, default=60.0)
    reset.set_defaults(func=_reset)

    fork = subparsers.add_parser(
        "fork",
        help="a new run from a run's history before a position, to compare: the original is left "
        "alone and effecting tools are skipped (recorded, never called)",
    )
    fork.add_argument("run")
    fork.add_argument("--at", type=int, required=True, help="first position the fork executes (1-based)")
    fork.add_argument(
        "--set",
        action="append",
        type=_override,
        metavar="KEY=VALUE",
        help="an override the workflow sees in ctx.overrides from --at on (model=NAME, prompt_version=V); repeatable",
    )
    fork.add_argument("--run-id", help="the fork's run id (default: a fresh one)")
    fork.add_argument("--wait", action="store_true", help="wait and print the fork's result as JSON")
    fork.add_argument("--timeout", type=float, default=60.0)
    fork.set_defaults(func=_fork)

    cancel = subparsers.add_parser("cancel", help="cancel a run")
    cancel.add_argument("run")
    cancel.add_argument("--reason", default="cancelled by request")
    cancel.set_defaults(func=_cancel)
