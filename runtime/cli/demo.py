"""``agentlog demo``: the refund agent, killed at step 31 and recovered, from a checkout.

The demo is the repository's ``examples`` package, which an installed agentlog does not include
(examples are not the product). Like ``worker --app``, the command imports it from the working
directory, so it runs from the root of a checkout, as ``make demo`` runs ``python -m examples.demo``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

from runtime.config import Settings
from runtime.errors import AgentlogError

DEMO_MODULE = "examples.demo"


def _demo(args: argparse.Namespace, settings: Settings) -> int:
    del args, settings  # the demo reads its settings from the environment, like the workers it starts
    if "." not in sys.path:
        sys.path.insert(0, ".")
    try:
        demo = importlib.import_module(DEMO_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name not in ("examples", DEMO_MODULE):  # the demo's own imports failed: say so as it is
            raise
        raise AgentlogError(
            f"agentlog demo runs {DEMO_MODULE} of a checkout of the agentlog repository, which an installed "
            "agentlog does not include: run it from the checkout's root (or `make demo` there)"
        ) from exc
    main: Callable[[], int] = demo.main
    return main()


def add_demo_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    subparsers.add_parser("demo", help="the refund agent, killed at step 31 and recovered").set_defaults(
        func=_demo
    )
