"""``agentlog infra up | down | status``: the local services."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from infra import kafka, kafka_users, stack
from infra.topics import ensure_topics
from runtime.config import Settings
from runtime.log.kafka.roles import ROLES


def format_table(services: Sequence[stack.ServiceInfo]) -> str:
    """An aligned table: service, state, address, pid, log file."""
    rows = [("SERVICE", "STATE", "ADDRESS", "PID", "LOG")]
    rows += [
        (
            s.name,
            "running" if s.running else "stopped",
            s.address,
            str(s.pid) if s.pid is not None else "-",
            str(s.log_path),
        )
        for s in services
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in rows
    )


def _progress(message: str) -> None:
    print(f"agentlog infra: {message}", file=sys.stderr, flush=True)


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    # A ServiceError reaches runtime.cli.main, which prints it on one line.
    print(format_table(stack.up(settings, _progress, brokers=args.brokers, secure=args.secure, tls=args.tls)))
    if kafka.node_count(settings) > 1:
        print(f"clients reach the cluster with AGENTLOG_BOOTSTRAP_SERVERS={kafka.bootstrap(settings)}")
    return 0


def cmd_down(args: argparse.Namespace, settings: Settings) -> int:
    for line in stack.down(settings):
        print(line)
    return 0


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    print(format_table(stack.status(settings)))
    return 0


def add_infra_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``infra up | down | status``; each sets ``func(args, settings) -> int``."""
    infra = subparsers.add_parser(
        "infra",
        help="start, stop or show the local Kafka, schema registry and PostgreSQL",
        description="The local services, with data, pid files and logs in the state folder.",
    )
    actions = infra.add_subparsers(
        dest="infra_command", metavar="{up,down,status,topics,users}", required=True
    )
    up = actions.add_parser(
        "up", help="start the services that are not running and create the topics (idempotent)"
    )
    up.add_argument(
        "--brokers",
        type=int,
        default=None,
        help="Kafka nodes (KRaft, each a broker and a voter of the controller quorum) on kafka_port, "
        "kafka_port+1, ...; 3 gives every topic replication factor 3 and min.insync.replicas 2. Fixed "
        "when a state folder is first formatted (default: what the state folder has, else 1)",
    )
    up.add_argument(
        "--secure",
        action="store_true",
        help="clients must authenticate with SASL/SCRAM-SHA-512 (a SASL_PLAINTEXT listener), and Kafka's "
        "StandardAuthorizer allows each user what its role's ACLs say; the user in AGENTLOG_KAFKA "
        '({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": ..., '
        '"sasl.password": ...}) is the admin, and one user per role (agentlog-submitter, agentlog-worker, '
        "agentlog-sink) is made with its settings in <state_dir>/kafka/users/. Fixed when a state folder "
        "is first formatted",
    )
    up.add_argument(
        "--tls",
        action="store_true",
        help="with --secure: the SASL listener speaks TLS (SASL_SSL) with a CA and node certificate made in "
        '<state_dir>/kafka/tls/; AGENTLOG_KAFKA then holds "security.protocol": "SASL_SSL" and '
        '"ssl.ca.location": "<state_dir>/kafka/tls/ca.pem"',
    )
    up.set_defaults(func=cmd_up)
    actions.add_parser("down", help="stop the services of this state folder").set_defaults(func=cmd_down)
    actions.add_parser("status", help="show each service, its address, pid and log file").set_defaults(
        func=cmd_status
    )
    actions.add_parser(
        "topics",
        help="only create the topics, on the configured cluster (for a cluster agentlog did not start)",
    ).set_defaults(func=cmd_topics)
    users = actions.add_parser("users", help="the Kafka users of a secure cluster (infra up --secure)")
    user_actions = users.add_subparsers(dest="users_command", metavar="{add}", required=True)
    add = user_actions.add_parser(
        "add",
        help="create a user with a new random password and its role's ACLs on this deployment's topics; "
        "for an existing user: a new password (the old one stops working) and its ACLs reset to the role's",
    )
    add.add_argument("name", help="the user name (letters, digits, '-', '_', '.')")
    add.add_argument(
        "--role",
        required=True,
        choices=ROLES,
        help="submitter: writes commands, reads results; worker: reads commands, writes events, "
        "checkpoints and payloads; sink: reads events and payloads; admin: everything",
    )
    add.set_defaults(func=cmd_users_add)


def cmd_topics(args: argparse.Namespace, settings: Settings) -> int:
    for line in ensure_topics(settings):
        print(line)
    return 0


def cmd_users_add(args: argparse.Namespace, settings: Settings) -> int:
    path = kafka_users.add_user(settings, args.name, args.role)
    # The password stays in the file: never on the terminal, where logs and scrollback keep it.
    print(f"user {args.name} (role {args.role}): its AGENTLOG_KAFKA settings are in {path} (mode 0600)")
    print(f'use them with: export AGENTLOG_KAFKA="$(cat {path})"')
    return 0
