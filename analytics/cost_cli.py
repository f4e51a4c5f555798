"""``agentlog audit call``, ``audit cost`` and ``audit prices load``: added to the ``audit`` parser.

Kept apart from analytics.cli so each group of audit questions owns its handlers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.config import Settings

from . import audit, calls, prices, render, unseal

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]


def add_call_and_cost_commands(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    call = commands.add_parser(
        "call", parents=[common], help="one call: its full prompt (or tool args), usage, cost and result"
    )
    call.add_argument("run_id", metavar="RUN")
    call.add_argument("position", metavar="POSITION", type=int)
    call.set_defaults(func=_audit_call)

    cost = commands.add_parser("cost", parents=[common], help="tokens and cost of model calls, grouped")
    cost.add_argument("--by", choices=tuple(calls.COST_KEYS), default="run")
    cost.add_argument("--since", help="ISO-8601 time or a duration back from now (15m, 2h, 7d)")
    cost.add_argument("--limit", type=int, default=100)
    cost.add_argument(
        "--whatif",
        nargs="?",
        const="*",
        metavar="ID",
        help="with what-if runs' calls (agentlog whatif), left out otherwise (their total is said); "
        "with an ID, only that what-if's",
    )
    cost.set_defaults(func=_audit_cost)

    price = commands.add_parser("prices", help="the model prices cost is computed with")
    price_commands = price.add_subparsers(dest="prices_command", required=True)
    load = price_commands.add_parser(
        "load", parents=[common], help="replace the prices with a CSV file's (see analytics/prices.py)"
    )
    load.add_argument("file", metavar="FILE", type=Path)
    load.set_defaults(func=_prices_load)


def _dsn(args: argparse.Namespace, settings: Settings) -> str:
    return str(args.dsn or settings.analytics_dsn)


def _audit_call(args: argparse.Namespace, settings: Settings) -> int:
    with unseal.reading(_dsn(args, settings), settings) as store:
        found = calls.call(store, args.run_id, args.position)
    if args.json:
        json.dump(found, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write("\n".join(calls.describe_call(found)) + "\n")
    return 0 if found.get("verified", True) else 1


def _audit_cost(args: argparse.Namespace, settings: Settings) -> int:
    since = audit.parse_since(args.since) if args.since else None
    with unseal.reading(_dsn(args, settings), settings) as store:
        rows = calls.cost(store, args.by, since, args.limit, args.whatif)
        left_out = calls.whatif_spend(store, since) if args.whatif is None else (0, 0.0)
    if args.json:
        render.as_json(rows.rows, sys.stdout)
    else:
        render.table(rows.columns, rows.rows, sys.stdout)
    if left_out[0]:  # what-if calls are real, paid calls: say what was left out rather than hide it
        print(
            f"what-if calls left out: {left_out[0]} calls, {left_out[1]:.6f} USD (--whatif to include them)",
            file=sys.stderr if args.json else sys.stdout,
        )
    return 0


def _prices_load(args: argparse.Namespace, settings: Settings) -> int:
    count = prices.load(_dsn(args, settings), prices.read_prices(args.file))
    if args.json:
        json.dump({"loaded": count, "file": str(args.file)}, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(f"loaded {count} prices from {args.file}")
    return 0
