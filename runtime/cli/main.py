"""The ``agentlog`` command line: a thin layer over the Python API.

Each area registers its own subcommands (``infra``, ``schemas``, the run commands, ``sink``,
``audit``); every handler receives the parsed arguments and one validated ``Settings``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from runtime.config import ConfigError, Settings, load_settings
from runtime.errors import AgentlogError

Handler = Callable[[argparse.Namespace, Settings], int]
Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


# Options of the top-level parser that take a value (to find the subcommand before parsing).
_GLOBAL_OPTIONS_WITH_VALUE = ("--state-dir", "--bootstrap-servers", "--schema-registry-url", "--partitions")


def _subcommand(argv: Sequence[str]) -> str | None:
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token in _GLOBAL_OPTIONS_WITH_VALUE:
            skip = True
        elif not token.startswith("-"):
            return token
    return None


def _registrars(argv: Sequence[str] = ()) -> list[Registrar]:
    # Imported here so `agentlog --help` stays fast and one broken area cannot hide the others.
    from runtime.cli.runs import add_run_commands

    if _subcommand(argv) == "worker":
        # A restarted worker's recovery time starts with its imports: it loads only its own area
        # (the infra and analytics commands cost ~90 ms of imports it never uses).
        return [add_run_commands]
    from infra.cli import add_infra_commands
    from runtime.cli.schemas import add_schema_commands

    registrars: list[Registrar] = [add_infra_commands, add_schema_commands, add_run_commands]
    try:
        from analytics.cli import add_analytics_commands
    except ImportError:  # the analytics package is optional in a slim worker image
        pass
    else:
        registrars.append(add_analytics_commands)
    return registrars


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentlog", description="A durable runtime for AI-agent runs on Kafka."
    )
    parser.add_argument("--state-dir", help="state folder (default .agentlog/; env AGENTLOG_STATE_DIR)")
    parser.add_argument(
        "--bootstrap-servers", help="Kafka bootstrap servers (env AGENTLOG_BOOTSTRAP_SERVERS)"
    )
    parser.add_argument(
        "--schema-registry-url", help="schema registry URL (env AGENTLOG_SCHEMA_REGISTRY_URL)"
    )
    parser.add_argument("--partitions", type=int, help="partitions of the commands and events topics")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for register in _registrars(argv):
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        settings = load_settings(
            state_dir=args.state_dir,
            bootstrap_servers=args.bootstrap_servers,
            schema_registry_url=args.schema_registry_url,
            partitions=args.partitions,
            **getattr(args, "settings_overrides", lambda: {})(),
        )
    except ConfigError as exc:
        print(f"agentlog: configuration error: {exc}", file=sys.stderr)
        return 2
    handler: Handler = args.func
    try:
        return handler(args, settings)
    except AgentlogError as exc:
        print(f"agentlog: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
