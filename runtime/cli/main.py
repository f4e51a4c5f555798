"""The ``agentlog`` command line: a thin layer over the Python API.

Each package registers its own subcommands in the ``agentlog.commands`` entry-point group: the
entry point's name is the top-level subcommand it adds, its value a registrar
``(subparsers) -> None``; a registrar that adds several subcommands is listed under each name.
Every handler receives the parsed arguments and one validated ``Settings``. Any ``AgentlogError``
-- from a handler, from loading a package's commands, from the configuration -- ends the process
with one line, ``agentlog: <message>``, and no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from runtime import stagemarks
from runtime.config import ConfigError, Settings, load_settings
from runtime.errors import AgentlogError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

Handler = Callable[[argparse.Namespace, Settings], int]
Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

COMMANDS_GROUP = "agentlog.commands"

# runtime's own commands, as pyproject.toml lists them in COMMANDS_GROUP (tests/unit/test_cli_errors.py
# checks that the two agree): one of these is found without reading the entry points of every
# installed distribution -- importing importlib.metadata and one scan of the environment cost a
# restarted worker ~50 ms of CPU before its first record (bench/recovery.py).
OWN_COMMANDS = {
    **dict.fromkeys(
        ("worker", "submit", "status", "history", "signal", "cancel", "reset", "fork", "replay-check"),
        "runtime.cli.runs:add_run_commands",
    ),
    "erase": "runtime.cli.erase:add_erase_command",
    "upgrade": "runtime.cli.upgrade:add_upgrade_commands",
    "schemas": "runtime.cli.schemas:add_schema_commands",
    **dict.fromkeys(("schedule", "scheduler"), "runtime.cli.schedules:add_schedule_commands"),
    "demo": "runtime.cli.demo:add_demo_command",
    **dict.fromkeys(("watch", "query"), "runtime.cli.watching:add_watch_commands"),
    "whatif": "runtime.cli.whatif:add_whatif_command",
}

# Options of the top-level parser that take a value (to find the subcommand before parsing).
_GLOBAL_OPTIONS_WITH_VALUE = ("--state-dir", "--bootstrap-servers", "--schema-registry-url", "--partitions")


class CommandLoadError(AgentlogError):
    """A package's commands could not be imported (a missing optional dependency, a broken install)."""


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


def entry_points(**selection: str) -> Any:
    """``importlib.metadata.entry_points``, imported when first needed (see OWN_COMMANDS)."""
    from importlib.metadata import entry_points as installed

    return installed(**selection)


def _load_own(name: str) -> Registrar:
    module, _, attr = OWN_COMMANDS[name].partition(":")
    try:
        registrar: Registrar = getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise CommandLoadError(f"cannot load the {name!r} command ({OWN_COMMANDS[name]}): {exc}") from exc
    return registrar


def _load(entry: EntryPoint) -> Registrar:
    try:
        registrar: Registrar = entry.load()
    except ImportError as exc:
        raise CommandLoadError(f"cannot load the {entry.name!r} command ({entry.value}): {exc}") from exc
    return registrar


def _registrars(argv: Sequence[str] = ()) -> list[Registrar]:
    """Only the registrar of the chosen subcommand is imported: a restarted worker's recovery time
    starts with its imports, and the other packages' commands pull in modules it never uses. One of
    runtime's own (OWN_COMMANDS) is found without reading the entry points at all. With no known
    subcommand (``--help``, a typo) every package's commands load, so argparse can list them."""
    chosen = _subcommand(argv)
    if chosen in OWN_COMMANDS:
        return [_load_own(chosen)]
    if chosen is not None:
        named = entry_points(group=COMMANDS_GROUP, name=chosen)
        if named:
            return [_load(next(iter(named)))]
    found = entry_points(group=COMMANDS_GROUP)
    if not found:
        raise CommandLoadError(
            f"no commands in the {COMMANDS_GROUP!r} entry-point group: agentlog's metadata is not "
            "installed from this source (pip install -e .)"
        )
    registrars: list[Registrar] = []
    seen: set[str] = set()
    # runtime's own commands first, then each package's, in a stable order.
    for entry in sorted(found, key=lambda e: (not e.value.startswith("runtime."), e.value)):
        if entry.value in seen:
            continue
        seen.add(entry.value)
        try:
            registrars.append(_load(entry))
        except CommandLoadError as exc:
            # A slim image may lack a package's dependencies: its commands are left out of the
            # listing, and said so, rather than hiding every other package's commands.
            print(f"agentlog: {one_line(exc)}", file=sys.stderr)
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


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(
        state_dir=args.state_dir,
        bootstrap_servers=args.bootstrap_servers,
        schema_registry_url=args.schema_registry_url,
        partitions=args.partitions,
        # `worker` and `sink` take --metrics-port (env AGENTLOG_METRICS_PORT)
        metrics_port=getattr(args, "metrics_port", None),
        **getattr(args, "settings_overrides", lambda: {})(),
    )


def one_line(error: BaseException) -> str:
    """The error's message on one line (pydantic's, for one, spans several), or its class name."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return "; ".join(lines) or type(error).__name__


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    stagemarks.start("cli imported")
    try:
        args = build_parser(argv).parse_args(argv)
        stagemarks.start("arguments parsed")
        settings = _settings(args)
        stagemarks.start("settings built")
        handler: Handler = args.func
        return handler(args, settings)
    except ConfigError as exc:
        print(f"agentlog: configuration error: {one_line(exc)}", file=sys.stderr)
        return 2
    except AgentlogError as exc:
        print(f"agentlog: {one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
