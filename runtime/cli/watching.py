"""``agentlog watch RUN`` and ``agentlog query RUN NAME``: a run followed as it works, and the state
it exposes (runtime.client.streaming, runtime.client.queries)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import TextIO

from runtime.config import Settings
from runtime.log.records.stream import StreamEvent


def describe(event: StreamEvent) -> str | None:
    """One line for an event a terminal shows on its own line; None for a delta (printed as it comes)."""
    d, where = event.data, f"[{event.position}]"
    if event.kind == "delta":
        return None
    if event.kind == "started":
        return f"{where} {d.get('call')} {d.get('name')!r} started"
    sealed = " (sealed: seal_contents keeps contents out of the stream)" if d.get("sealed") else ""
    if event.kind == "attempt":
        return f"{where} attempt {event.attempt}" + (
            " (sealed: its answer is not streamed)" if sealed else ""
        )
    if event.kind == "superseded":
        return f"{where} attempt {event.attempt} superseded ({d.get('reason')}): what it said above is void"
    if event.kind == "completed":
        result = d.get("result")
        return f"{where} completed" + (f": {result}" if result is not None else sealed)
    if event.kind == "failed":
        error = f"{d.get('error_type')}" + (sealed if d.get("error") is None else f": {d.get('error')}")
        return f"{where} attempt {event.attempt} failed: {error}" + (
            "" if d.get("final") else " (to be retried)"
        )
    if event.kind == "waiting":
        return f"{where} waiting for {d.get('for')} {d.get('name')!r}"
    if event.kind == "signal":
        return f"signal {d.get('name')!r} received"
    if event.kind == "ended":
        detail = d.get("result", d.get("error", d.get("next_run")))
        return f"run {d.get('status')}" + (f": {detail}" if detail is not None else sealed)
    return f"(gap) {d.get('reason')}"


def print_stream(events: Iterable[StreamEvent], out: TextIO = sys.stdout, as_json: bool = False) -> None:
    mid_line = False
    for event in events:
        if as_json:
            print(json.dumps(event.to_json()), file=out, flush=True)
            continue
        line = describe(event)
        if line is None:
            if not mid_line:
                out.write(f"[{event.position}] ")
            out.write(str(event.data.get("text", "")))
            out.flush()
            mid_line = True
            continue
        if mid_line:
            out.write("\n")
            mid_line = False
        print(line, file=out, flush=True)


def _watch(args: argparse.Namespace, settings: Settings) -> int:
    from runtime.client import Client

    with Client(settings, identity="cli") as client:
        events = client.stream(args.run, since=args.since)
        try:
            print_stream(events, as_json=args.json)
        except KeyboardInterrupt:
            return 130
        finally:
            events.close()
    return 0


def _query(args: argparse.Namespace, settings: Settings) -> int:
    from runtime.client import Client

    with Client(settings, identity="cli") as client:
        print(json.dumps(client.query(args.run, args.name)))
    return 0


def add_watch_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    watch = subparsers.add_parser(
        "watch", help="follow a run as it works: its steps and model output as they happen, until it ends"
    )
    watch.add_argument("run")
    watch.add_argument(
        "--since",
        choices=("start", "current", "now"),
        default="start",
        help="start: the run's whole history first; current: its steps in progress; now: only what follows",
    )
    watch.add_argument("--json", action="store_true", help="one JSON object per event")
    watch.set_defaults(func=_watch)
    query = subparsers.add_parser("query", help="the latest value a run exposed under a name (ctx.expose)")
    query.add_argument("run")
    query.add_argument("name")
    query.set_defaults(func=_query)
