"""``agentlog audit ...``: thin handlers over ``analytics.audit`` (entry point ``audit``).

Handlers take the parsed arguments and the validated Settings and return an exit code; errors
of the agentlog taxonomy propagate to ``runtime.cli.main``, which prints them and exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from runtime.config import Settings

from . import audit, diff, render, unseal
from .cost_cli import add_call_and_cost_commands
from .store import connect

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]


def add_audit_commands(subparsers: Subparsers) -> None:
    """Register ``audit`` on the top-level ``agentlog`` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dsn", help="store to read (default: the settings' analytics DSN)")
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")

    parser = subparsers.add_parser("audit", help="what runs did, from ClickHouse")
    commands = parser.add_subparsers(dest="audit_command", required=True)

    run = commands.add_parser("run", parents=[common], help="a run's timeline, in log order")
    run.add_argument("run_id", metavar="RUN")
    run.set_defaults(func=_audit_run)

    tools = commands.add_parser("tools", parents=[common], help="tool calls: attempts per idempotency key")
    tools.add_argument("--tool", help="only this tool")
    tools.add_argument("--since", help="ISO-8601 time or a duration back from now (15m, 2h, 7d)")
    tools.add_argument("--limit", type=int, default=100)
    _whatif_option(tools)
    tools.set_defaults(func=_audit_tools)

    div = commands.add_parser(
        "divergences", parents=[common], help="re-decisions, non-determinism, parked runs"
    )
    div.add_argument("--run", dest="run_id", help="only this run")
    div.add_argument("--limit", type=int, default=100)
    _whatif_option(div)
    div.set_defaults(func=_audit_divergences)

    size = commands.add_parser(
        "history-size", parents=[common], help="runs by history size vs the thresholds"
    )
    size.add_argument("--over", choices=("warn", "limit"), help="only runs at or over this threshold")
    size.add_argument("--top", type=int, default=20)
    _whatif_option(size)
    size.set_defaults(func=_audit_history_size)

    runs = commands.add_parser("runs", parents=[common], help="runs, most recently active first")
    runs.add_argument(
        "--status", help="running, completed, failed, cancelled, parked, rejected, continued_as_new"
    )
    runs.add_argument("--limit", type=int, default=50)
    runs.add_argument("--parent", metavar="RUN", help="only the child runs RUN started (ctx.child)")
    _whatif_option(runs)
    runs.set_defaults(func=_audit_runs)

    whatif = commands.add_parser(
        "whatif", parents=[common], help="a what-if's runs beside their originals (agentlog whatif)"
    )
    whatif.add_argument("whatif_id", metavar="ID")
    whatif.set_defaults(func=_audit_whatif)

    diff = commands.add_parser(
        "diff", parents=[common], help="two runs aligned by position: the first divergence, then the rest"
    )
    diff.add_argument("run_a", metavar="RUN_A")
    diff.add_argument("run_b", metavar="RUN_B")
    diff.set_defaults(func=_audit_diff)

    verify = commands.add_parser(
        "verify",
        parents=[common],
        help="recompute a run's hash chain from Kafka (and the store) and name the first bad record",
    )
    verify.add_argument("run_id", metavar="RUN")
    verify.add_argument("--from-store", action="store_true", help="also verify the store's rows of the run")
    verify.set_defaults(func=_audit_verify)

    sql = commands.add_parser("sql", parents=[common], help="one read-only SQL statement")
    sql.add_argument("statement", metavar="SQL")
    sql.set_defaults(func=_audit_sql)

    add_call_and_cost_commands(commands, common)


def _whatif_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--whatif",
        nargs="?",
        const="*",
        metavar="ID",
        help="with what-if runs (agentlog whatif), left out otherwise; with an ID, only that what-if's",
    )


def _dsn(args: argparse.Namespace, settings: Settings) -> str:
    return str(args.dsn or settings.analytics_dsn)


def _print(args: argparse.Namespace, rows: audit.Rows) -> int:
    if args.json:
        render.as_json(rows.rows, sys.stdout)
    else:
        render.table(rows.columns, rows.rows, sys.stdout)
    return 0


def _audit_run(args: argparse.Namespace, settings: Settings) -> int:
    with unseal.reading(_dsn(args, settings), settings) as store:
        events = audit.run_events(store, args.run_id, settings.events_topic)
    if not events:
        print(f"agentlog audit: no events for run {args.run_id!r} in the store", file=sys.stderr)
        if not args.json:
            return 1
    if args.json:
        render.as_json(events, sys.stdout)
        return 0 if events else 1
    rows = audit.timeline(events)
    render.table(rows.columns, rows.rows, sys.stdout)
    return 0


def _audit_verify(args: argparse.Namespace, settings: Settings) -> int:
    """Exit 0 only if every source asked holds the run and its chain verifies."""
    from . import verify

    reader = verify.read_only(settings)  # the sink's read-only role is enough
    try:
        checks = verify.checks(reader)
        # "kafka" / "store" for the chain (as before); "... signatures" for the workers' signatures
        verdicts = [
            (f"kafka{'' if c == 'chain' else ' ' + c}", verify.verify_log(reader, args.run_id, c))
            for c in checks
        ]
        if args.from_store:
            with connect(_dsn(args, settings)) as store:  # the sealed bytes, which the chain covers
                verdicts += [
                    (
                        f"store{'' if c == 'chain' else ' ' + c}",
                        verify.verify_store(reader, store, args.run_id, c),
                    )
                    for c in checks
                ]
    finally:
        reader.close()
    if args.json:
        render.as_json(
            [
                {
                    "source": source,
                    "ok": v.ok,
                    "records": v.records,
                    "at": v.broken_at.where if v.broken_at else None,
                    "seq": v.broken_at.seq if v.broken_at else None,
                    "type": v.broken_at.type if v.broken_at else None,
                    "kind": v.kind or None,
                }
                for source, v in verdicts
            ],
            sys.stdout,
        )
    else:
        for source, v in verdicts:
            print(f"{source}: {v.describe()}")
    return 0 if all(v.ok for _, v in verdicts) else 1


def _audit_tools(args: argparse.Namespace, settings: Settings) -> int:
    since = audit.parse_since(args.since) if args.since else None
    with unseal.reading(_dsn(args, settings), settings) as store:
        return _print(args, audit.tool_attempts(store, args.tool, since, args.limit, args.whatif))


def _audit_divergences(args: argparse.Namespace, settings: Settings) -> int:
    with unseal.reading(_dsn(args, settings), settings) as store:
        return _print(args, audit.divergences(store, args.run_id, args.limit, args.whatif))


def _audit_history_size(args: argparse.Namespace, settings: Settings) -> int:
    with unseal.reading(_dsn(args, settings), settings) as store:
        return _print(args, audit.history_size(store, settings, args.over, args.top, args.whatif))


def _audit_runs(args: argparse.Namespace, settings: Settings) -> int:
    with unseal.reading(_dsn(args, settings), settings) as store:
        return _print(args, audit.runs(store, args.status, args.limit, args.parent, args.whatif))


def _audit_whatif(args: argparse.Namespace, settings: Settings) -> int:
    with unseal.reading(_dsn(args, settings), settings) as store:
        return _print(args, audit.whatif_runs(store, args.whatif_id))


def _audit_sql(args: argparse.Namespace, settings: Settings) -> int:
    with unseal.reading(_dsn(args, settings), settings) as store:
        return _print(args, audit.sql(store, args.statement))


def _audit_diff(args: argparse.Namespace, settings: Settings) -> int:
    with unseal.reading(_dsn(args, settings), settings) as store:
        result = diff.diff_runs(store, args.run_a, args.run_b, settings.events_topic)
    if args.json:
        json.dump(result, sys.stdout, separators=(",", ":"))
        sys.stdout.write("\n")
    else:
        diff.print_diff(result, sys.stdout)
    return 0
