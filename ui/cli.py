"""``agentlog ui``: the web UI over the audit store (entry point ``ui`` of ``agentlog.commands``)."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from typing import TYPE_CHECKING

from runtime.config import Settings

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

DEFAULT_PORT = 8787
TOKEN_ENV = "AGENTLOG_UI_TOKEN"


def add_ui_command(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "ui", help="a read-only web UI over the audit store: runs, timelines, diffs"
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port to serve on (default {DEFAULT_PORT})"
    )
    parser.add_argument("--dsn", help="store to read (default: the settings' analytics DSN)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1); any other address requires a token",
    )
    parser.add_argument(
        "--token",
        default=None,
        help=f"the token a browser must present (default ${TOKEN_ENV}; generated and printed for --host)",
    )
    parser.set_defaults(func=_ui)


def _ui(args: argparse.Namespace, settings: Settings) -> int:
    # jinja2 and the pages load only for this command
    from .server import LOOPBACK_HOSTS, UiConfigError, UiServer

    token = args.token or os.environ.get(TOKEN_ENV) or None
    if args.host not in LOOPBACK_HOSTS and token is None:
        token = secrets.token_urlsafe(24)
    if token is not None and len(token) < 16:
        raise UiConfigError("--token must be at least 16 characters")
    server = UiServer(settings, str(args.dsn or settings.analytics_dsn), args.host, args.port, token)
    url = server.url + (f"?token={token}" if token else "")
    print(f"agentlog ui: serving {server.dsn} read-only on {url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    print("agentlog ui: stopped", file=sys.stderr)
    return 0
