"""``python -m infra up | down | status`` (the same as ``agentlog infra ...``) with default settings."""

from __future__ import annotations

import argparse
import sys

from infra.cli import add_infra_commands
from runtime.cli.main import one_line
from runtime.config import load_settings
from runtime.errors import AgentlogError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m")
    add_infra_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["infra", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args, load_settings()))
    except AgentlogError as exc:
        print(f"agentlog: {one_line(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
