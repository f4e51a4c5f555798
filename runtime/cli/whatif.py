"""``agentlog whatif``: recorded runs replayed as dry forks under a changed prompt, model or code, and
which of their decisions change and what it costs (runtime.whatif does the work; this parses and prints).

    agentlog whatif --workflow refund --last 200 --prompt planner=@new_prompt.txt [--prices prices.csv]
    agentlog whatif RUN_ID ... --model planner=planner-v2 --workers-app myagent:app --json
    agentlog whatif --workflow refund --last 50 --app myagent_v2:app
    agentlog whatif --resume ID      # start the forks an interrupted what-if had not started
    agentlog whatif --report ID      # the report as far as the what-if got, from the log
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.config import Settings
from runtime.errors import AgentlogError

if TYPE_CHECKING:
    from runtime.pricing import PriceTable
    from runtime.whatif.report import Report, Side


def _since_ms(text: str) -> int:
    try:
        at = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as error:
        raise AgentlogError(f"--since {text!r} is not an ISO 8601 date or time") from error
    if at.tzinfo is None:
        at = at.replace(tzinfo=dt.UTC)
    return int(at.timestamp() * 1000)


def _prices(args: argparse.Namespace, settings: Settings) -> PriceTable | None:
    from runtime.pricing import PriceTable, read_prices

    path: Path | None = Path(args.prices) if args.prices else settings.price_table
    return None if path is None else PriceTable(read_prices(path))


def _cost(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}"


def _side(side: Side | None) -> tuple[str, str, str]:
    if side is None:
        return "-", "-", "-"
    return str(side.tokens), _cost(side.cost_usd), f"{side.latency_ms}"


def print_report(report: Report) -> None:
    """The report as a table: one row a run, then the aggregate."""
    header = ("run", "state", "tokens", "cost USD", "latency ms", "first difference (original -> what-if)")
    lines: list[tuple[str, ...]] = [header]
    for row in report.rows:
        before, after = _side(row.original), _side(row.whatif)
        difference = ""
        if row.first_difference is not None:
            difference = f"{row.first_difference['original']} -> {row.first_difference['whatif']}"
        lines.append(
            (
                row.origin,
                row.state,
                f"{before[0]} -> {after[0]}",
                f"{before[1]} -> {after[1]}",
                f"{before[2]} -> {after[2]}",
                difference,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    for line in lines:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=False)) + "  " + line[-1]
        )
    for row in report.changed:  # an unchanged run would have made the effects its original made
        for call in row.whatif.would_have_called if row.whatif is not None else ():
            print(f"would have called  {row.origin}: {call.describe()}")
    print(f"what-if   {report.whatif_id}: {report.change}")
    print(f"result    {report.summary()}")
    if report.cost_delta_usd is not None:
        print(
            f"cost      {_cost(report.original_cost_usd)} -> {_cost(report.whatif_cost_usd)} USD "
            f"({report.cost_delta_usd:+.6f}); tokens {report.original_tokens} -> {report.whatif_tokens}"
        )


def _whatif(args: argparse.Namespace, settings: Settings) -> int:
    from runtime.client import Client
    from runtime.whatif import session
    from runtime.whatif.change import check_models, parse_change
    from runtime.whatif.selection import Selection

    prices = _prices(args, settings)
    progress = None if args.json else (lambda run_id: print(f"ended     {run_id}", file=sys.stderr))
    options = session.Options(window=args.window, timeout=args.timeout, prices=prices, progress=progress)
    if (args.resume or args.report) and (
        args.runs or args.prompt or args.model or args.app or args.workflow or args.workers_app
    ):
        raise AgentlogError(
            "--resume and --report take a what-if id only: its runs and change are in the log"
        )
    app = None
    if not (args.resume or args.report):
        change = parse_change(args.prompt or [], args.model or [], args.app)
        if args.app and args.workers_app:
            raise AgentlogError(
                "--workers-app is for a change of the code the workers run; --app is new code"
            )
        if args.app or args.workers_app:
            from runtime.cli.runs import load_app

            app = load_app(args.app or args.workers_app)
        check_models(change, app)  # before connecting: a NEW model the code lacks
        if not args.runs and args.workflow is None:
            raise AgentlogError(
                "name the runs: run ids, or --workflow NAME (with --last N, --since, --status)"
            )
        selection = Selection(
            run_ids=tuple(args.runs),
            workflow=args.workflow,
            last=args.last,
            since_ms=_since_ms(args.since) if args.since else None,
            status=None if args.status == "any" else args.status,
        )
    with Client(settings, identity="whatif") as client:
        if args.report:
            report = session.report(client, args.report, prices)
        elif args.resume:
            report = session.resume(client, args.resume, options)
        else:
            prepared = session.prepare(client, selection, change, app)
            if not args.json:
                forks = sum(1 for p in prepared.planned if p.position is not None)
                print(
                    f"what-if   {prepared.whatif_id}: {change.describe()}; {forks} of "
                    f"{len(prepared.planned)} runs to replay (--resume {prepared.whatif_id} if interrupted)",
                    file=sys.stderr,
                )
            report = session.start(client, prepared, options)
    if args.json:
        print(json.dumps(report.as_dict(), sort_keys=True))
    else:
        print_report(report)
    return 0


def add_whatif_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = subparsers.add_parser(
        "whatif",
        help="replay recorded runs as dry forks under a changed prompt, model or code: which decisions "
        "change, and what it costs (nothing in the world is touched)",
    )
    sub.add_argument("runs", nargs="*", help="run ids to replay (or select with --workflow)")
    sub.add_argument("--workflow", help="replay runs of this workflow")
    sub.add_argument("--last", type=int, help="only the last N selected runs")
    sub.add_argument("--since", help="only runs started at or after this ISO 8601 time")
    sub.add_argument(
        "--status",
        default="completed",
        help="only runs that ended so (completed, failed, ...; any: every ended run)",
    )
    sub.add_argument(
        "--prompt",
        action="append",
        metavar="MODEL=TEXT|@FILE",
        help="replace the system prompt of every call of MODEL; repeatable",
    )
    sub.add_argument(
        "--model", action="append", metavar="OLD=NEW", help="call model NEW where OLD was; repeatable"
    )
    sub.add_argument(
        "--app", help="module:app of a new code version to replay the runs with (from their start)"
    )
    sub.add_argument(
        "--workers-app",
        metavar="MODULE:APP",
        help="the code the workers run (their --app), to check --model's NEW model against",
    )
    sub.add_argument("--resume", metavar="ID", help="start the forks an interrupted what-if had not started")
    sub.add_argument("--report", metavar="ID", help="a what-if's report as far as it got, from the log")
    sub.add_argument("--window", type=int, default=8, help="forks running at once (default 8)")
    sub.add_argument("--timeout", type=float, default=300.0, help="seconds one window of forks may take")
    sub.add_argument(
        "--prices", help="the model prices CSV to cost calls with (default: the price_table setting)"
    )
    sub.add_argument("--json", action="store_true")
    sub.set_defaults(func=_whatif)
