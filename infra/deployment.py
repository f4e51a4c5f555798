"""Throwaway deployments on the running services: fresh topics, a consumer group, schemas.

Tests and benchmarks each get one so they never see each other's runs; a worker or sink
subprocess joins it through the environment that ``environment`` returns.
"""

from __future__ import annotations

import json
import os
import uuid

from infra.topics import ensure_topics
from runtime.config import ENV_PREFIX, Settings
from runtime.log.schemas.registry_admin import SchemaAdmin


def scratch_deployment(
    base: Settings, partitions: int = 3, prefix: str = "t", *, register: bool = True
) -> Settings:
    tag = f"{prefix}{uuid.uuid4().hex[:8]}"
    settings = base.model_copy(
        update={
            "commands_topic": f"{tag}.commands",
            "events_topic": f"{tag}.events",
            "checkpoints_topic": f"{tag}.checkpoints",
            "payloads_topic": f"{tag}.payloads",
            "keys_topic": f"{tag}.keys",
            "limits_topic": f"{tag}.limits",
            "schedules_topic": f"{tag}.schedules",
            "stream_topic": f"{tag}.stream",
            "exposed_topic": f"{tag}.exposed",
            "partitions": partitions,
            "worker_group": f"{tag}.workers",
        }
    )
    ensure_topics(settings)
    if not register:  # a deployment whose schemas are not registered (what a broken upgrade meets)
        return settings
    refused = [report for report in SchemaAdmin(settings).register() if not report.ok]
    if refused:
        raise RuntimeError(f"schema registration refused: {refused}")
    return settings


def environment(settings: Settings, pythonpath: str, **extra: str) -> dict[str, str]:
    """This process's environment with the deployment's ``AGENTLOG_*`` settings (and no others)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env.update(
        {
            "PYTHONPATH": pythonpath,
            "AGENTLOG_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "AGENTLOG_SCHEMA_REGISTRY_URL": settings.schema_registry_url,
            "AGENTLOG_COMMANDS_TOPIC": settings.commands_topic,
            "AGENTLOG_EVENTS_TOPIC": settings.events_topic,
            "AGENTLOG_CHECKPOINTS_TOPIC": settings.checkpoints_topic,
            "AGENTLOG_PAYLOADS_TOPIC": settings.payloads_topic,
            "AGENTLOG_KEYS_TOPIC": settings.keys_topic,
            "AGENTLOG_LIMITS_TOPIC": settings.limits_topic,
            "AGENTLOG_SCHEDULES_TOPIC": settings.schedules_topic,
            "AGENTLOG_STREAM_TOPIC": settings.stream_topic,
            "AGENTLOG_EXPOSED_TOPIC": settings.exposed_topic,
            "AGENTLOG_SEAL_CONTENTS": "true" if settings.seal_contents else "false",
            "AGENTLOG_PARTITIONS": str(settings.partitions),
            "AGENTLOG_WORKER_GROUP": settings.worker_group,
            "AGENTLOG_STATE_DIR": str(settings.state_dir),
        }
    )
    if settings.kafka:  # the cluster's client settings, SASL credentials among them
        env["AGENTLOG_KAFKA"] = json.dumps(settings.kafka)
    env.update(extra)
    return env
