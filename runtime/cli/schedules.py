"""``agentlog schedule add|list|pause|resume|delete`` and ``agentlog scheduler``: thin layers over
``Client.schedules`` and ``runtime.schedules.Scheduler`` (docs/schedules.md)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import socket
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from runtime.config import Settings
from runtime.schedules.spec import CATCH_UPS

if TYPE_CHECKING:
    from runtime.client import Client
    from runtime.schedules import ScheduleInfo


def _client(settings: Settings, identity: str) -> Client:
    from runtime.client import Client

    return Client(settings, identity=identity)


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _add(args: argparse.Namespace, settings: Settings) -> int:
    from runtime.cli.runs import load_app
    from runtime.schedules.admin import check_against_app
    from runtime.schedules.spec import build_schedule

    # Everything the schedule says is checked before anything connects (build_schedule raises
    # ScheduleError naming what is wrong); add checks it again, with the time it is written.
    checked = build_schedule(
        args.name,
        args.workflow,
        args.input,
        cron=args.cron,
        every=args.every,
        timezone=args.timezone,
        catch_up=args.catch_up,
        active_from=0,
    )
    app = load_app(args.app) if args.app else None
    if app is not None:
        check_against_app(checked, app)
    with _client(settings, "cli") as client:
        schedule = client.schedules.add(
            args.name,
            args.workflow,
            raw_input=args.input,
            cron=args.cron,
            every=args.every,
            timezone=args.timezone,
            catch_up=args.catch_up,
            app=app,
            replace=args.replace,
        )
        info = client.schedules.get(schedule.name)
    print(
        f"schedule {schedule.name}: {schedule.when}, workflow {schedule.workflow}, next {_when(info.next_fire_time)}"
    )
    return 0


def _row(info: ScheduleInfo) -> dict[str, object]:
    s = info.schedule
    return {
        "name": s.name,
        "workflow": s.workflow,
        "input": json.loads(s.input),
        "cron": s.cron or None,
        "every_ms": s.every_ms or None,
        "timezone": s.timezone,
        "catch_up": s.catch_up,
        "paused": s.paused,
        "last_fire_time": _when(info.last_fire_time) if info.last_fire_time is not None else None,
        "last_run_id": info.last_run_id,
        "last_refused": info.last_refused,
        "next_fire_time": _when(info.next_fire_time) if info.next_fire_time is not None else None,
    }


def _list(args: argparse.Namespace, settings: Settings) -> int:
    with _client(settings, "cli") as client:
        infos = client.schedules.list()
    if args.json:
        print(json.dumps([_row(info) for info in infos]))
        return 0
    if not infos:
        print("no schedules")
    for info in infos:
        s = info.schedule
        state = "paused" if s.paused else f"next {_when(info.next_fire_time)}"
        last = info.last_run_id or (f"refused: {info.last_refused}" if info.last_refused else "-")
        print(f"{s.name:<20} {s.when:<28} {s.workflow:<16} {state:<30} last {last}")
    return 0


_DONE = {"pause": "paused", "resume": "resumed", "delete": "deleted"}


def _change(verb: str) -> Callable[[argparse.Namespace, Settings], int]:
    def handler(args: argparse.Namespace, settings: Settings) -> int:
        with _client(settings, "cli") as client:
            getattr(client.schedules, verb)(args.name)
        print(f"schedule {args.name}: {_DONE[verb]}")
        return 0

    return handler


def _scheduler(args: argparse.Namespace, settings: Settings) -> int:
    from runtime.cli.runs import load_app
    from runtime.cli.scheduling import fire_through

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr
    )
    workflows = set(load_app(args.app).workflows) if args.app else None
    identity = args.identity or f"scheduler-{socket.gethostname()}"
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with _client(settings, identity) as client:
        fire_through(client, workflows, stop)
    return 0


def add_schedule_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schedule = subparsers.add_parser("schedule", help="add, list, pause, resume or delete schedules")
    verbs = schedule.add_subparsers(dest="verb", required=True)
    add = verbs.add_parser("add", help="add a schedule (only fire times after now fire)")
    add.add_argument("name")
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--cron", help="five fields: minute hour day-of-month month day-of-week (or @daily ...)"
    )
    when.add_argument("--every", help="an interval: 2s, 5m, 1h, 1h30m (fire times count from the Unix epoch)")
    add.add_argument("--workflow", required=True)
    add.add_argument("--input", default="null", help="the workflow input as JSON")
    add.add_argument("--timezone", default="UTC", help="IANA time zone the cron is read in (default UTC)")
    add.add_argument(
        "--catch-up",
        choices=CATCH_UPS,
        default="latest",
        help="firings missed while no scheduler ran: latest (default) fires the most recent, all fires "
        "them (the latest 100), none skips them",
    )
    add.add_argument("--app", help="module:attribute of the App: refuse a workflow it does not register now")
    add.add_argument("--replace", action="store_true", help="replace a schedule of that name")
    add.set_defaults(func=_add)
    listing = verbs.add_parser("list", help="the schedules, what each last fired and when it fires next")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_list)
    for verb, text in (
        ("pause", "stop firing a schedule"),
        ("resume", "fire a paused schedule again (what it missed while paused never fires)"),
        ("delete", "delete a schedule (its runs are not touched)"),
    ):
        sub = verbs.add_parser(verb, help=text)
        sub.add_argument("name")
        sub.set_defaults(func=_change(verb))
    runner = subparsers.add_parser(
        "scheduler", help="fire the schedules (any number may run: each fire time starts one run)"
    )
    runner.add_argument(
        "--app", help="module:attribute of the App: a firing of a workflow it lacks is refused"
    )
    runner.add_argument("--identity", help="the name its records carry (default scheduler-<host>)")
    runner.set_defaults(func=_scheduler)
