"""``agentlog demo``: the examples package registers its own command (entry point ``demo``)."""

from __future__ import annotations

import argparse

from runtime.config import Settings


def _demo(args: argparse.Namespace, settings: Settings) -> int:
    del args, settings  # the demo reads its settings from the environment, like the workers it starts
    from examples.demo import main as demo_main

    return demo_main()


def add_demo_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    subparsers.add_parser("demo", help="the refund agent, killed at step 31 and recovered").set_defaults(
        func=_demo
    )
