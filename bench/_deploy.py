"""A throwaway deployment (fresh topics, consumer group, registered schemas) for a benchmark."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from infra.topics import ensure_topics
from runtime.config import Settings, load_settings
from runtime.registry_ops import SchemaAdmin

ROOT = Path(__file__).resolve().parent.parent


def fresh_deployment(partitions: int, prefix: str = "bench") -> Settings:
    tag = f"{prefix}{uuid.uuid4().hex[:6]}"
    settings = load_settings().model_copy(
        update={
            "commands_topic": f"{tag}.commands",
            "events_topic": f"{tag}.events",
            "checkpoints_topic": f"{tag}.checkpoints",
            "partitions": partitions,
            "worker_group": f"{tag}.workers",
        }
    )
    ensure_topics(settings)
    reports = SchemaAdmin(settings).register()
    bad = [r for r in reports if not r.ok]
    if bad:
        raise SystemExit(f"schema registration failed: {bad}")
    return settings


def env_for(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    env.update(
        PYTHONPATH=str(ROOT),
        AGENTLOG_BOOTSTRAP_SERVERS=settings.bootstrap_servers,
        AGENTLOG_SCHEMA_REGISTRY_URL=settings.schema_registry_url,
        AGENTLOG_COMMANDS_TOPIC=settings.commands_topic,
        AGENTLOG_EVENTS_TOPIC=settings.events_topic,
        AGENTLOG_CHECKPOINTS_TOPIC=settings.checkpoints_topic,
        AGENTLOG_PARTITIONS=str(settings.partitions),
        AGENTLOG_WORKER_GROUP=settings.worker_group,
        **extra,
    )
    return env


def start_worker(settings: Settings, worker_id: str, log: Path, **env: str) -> subprocess.Popen[bytes]:
    wrapper = os.environ.get("BENCH_WORKER_WRAPPER", "").split()  # e.g. "py-spy record -o prof.svg --"
    return subprocess.Popen(
        [
            *wrapper,
            sys.executable,
            "-m",
            "runtime.cli",
            "worker",
            "--app",
            "examples.refund_agent:app",
            "--worker-id",
            worker_id,
        ],
        cwd=ROOT,
        env=env_for(settings, **env),
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
