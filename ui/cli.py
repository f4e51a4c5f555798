"""``agentlog ui``: the web UI over the audit store (entry point ``ui`` of ``agentlog.commands``)."""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.config import Settings

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

DEFAULT_PORT = 8787


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
    # No AGENTLOG_* variable: the settings refuse unknown ones. A file keeps the token out of `ps`.
    tokens = parser.add_mutually_exclusive_group()
    tokens.add_argument("--token", default=None, help="the token a browser must present")
    tokens.add_argument("--token-file", default=None, help="read the token from this file")
    parser.epilog = "With --host and no token, one is generated and printed in the URL."
    parser.set_defaults(func=_ui)


def _ui(args: argparse.Namespace, settings: Settings) -> int:
    # jinja2 and the pages load only for this command
    from .server import LOOPBACK_HOSTS, UiConfigError, UiServer

    token = args.token or (Path(args.token_file).read_text().strip() if args.token_file else None)
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
