"""``agentlog sink``: a thin handler over ``consumers.runner`` (the consumers package registers it
itself, entry point ``sink``).

The handler takes the parsed arguments and the validated Settings and returns an exit code; errors
of the agentlog taxonomy propagate to ``runtime.cli.main``, which prints them on one line.
"""

from __future__ import annotations

import argparse
import logging
import sys

from runtime.config import Settings


def add_sink_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``sink`` on the top-level ``agentlog`` parser."""
    parser = subparsers.add_parser(
        "sink",
        help="copy the events topic into ClickHouse (runs until stopped)",
        description="Copy the events topic into ClickHouse. With an embedded store (chdb://), this process "
        "also answers `agentlog audit` on a local port while it runs.",
    )
    parser.add_argument(
        "--dsn", help="chdb:///path (embedded, default <state_dir>/analytics) or http://host:8123"
    )
    parser.add_argument(
        "--driver",
        choices=("direct", "faust"),
        default="direct",
        help="Kafka consumer: direct (confluent-kafka, the fast path, default) or faust (faust-streaming)",
    )
    parser.add_argument(
        "--batch-rows",
        type=int,
        default=200_000,
        help="most rows per ClickHouse insert, reached while the sink is behind (default 200000)",
    )
    parser.add_argument(
        "--flush-interval",
        type=float,
        default=0.5,
        help="seconds before a partial batch is written, when the writer is idle",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus /metrics, /healthz and /readyz on this port (0: a free one, logged; "
        "env AGENTLOG_METRICS_PORT)",
    )
    parser.set_defaults(func=_sink)


def _sink(args: argparse.Namespace, settings: Settings) -> int:
    from consumers.core import SinkConfig  # the sink's dependencies load only for this command
    from consumers.runner import run_sink

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        config = SinkConfig(batch_rows=args.batch_rows, flush_interval=args.flush_interval)
    except ValueError as exc:
        print(f"agentlog sink: {exc}", file=sys.stderr)
        return 2

    def ready(endpoint: object) -> None:
        where = f", queries on port {getattr(endpoint, 'port', '?')}" if endpoint is not None else ""
        print(
            f"agentlog sink: {settings.events_topic} -> {args.dsn or settings.analytics_dsn}{where}",
            file=sys.stderr,
        )

    stats = run_sink(settings, dsn=args.dsn, driver=args.driver, config=config, on_ready=ready)
    print(
        f"agentlog sink: stopped after {stats.rows_written} rows in {stats.batches_written} batches "
        f"({stats.undecodable} undecodable, {stats.retries} retries)",
        file=sys.stderr,
    )
    return 0
