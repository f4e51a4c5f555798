"""``python -m infra up | down | status`` (the same as ``agentlog infra ...``) with default settings."""

from __future__ import annotations

import argparse
import sys

from infra.cli import add_infra_commands
from runtime.config import load_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m")
    add_infra_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["infra", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args, load_settings()))


if __name__ == "__main__":
    sys.exit(main())
