"""A throwaway deployment (fresh topics, consumer group, registered schemas) for a benchmark."""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
from pathlib import Path

from infra.deployment import environment, scratch_deployment
from infra.topics import drop_topics
from runtime.config import Settings, load_settings

ROOT = Path(__file__).resolve().parent.parent


def fresh_deployment(partitions: int, prefix: str = "bench") -> Settings:
    """A scratch deployment whose topics are deleted when this process exits (``drop_topics``
    deletes them sooner; again at exit is a no-op): the broker does not carry every past
    benchmark's partitions into the next."""
    settings = scratch_deployment(load_settings(), partitions, prefix)
    atexit.register(drop_topics, settings)
    return settings


def env_for(settings: Settings, **extra: str) -> dict[str, str]:
    return environment(settings, str(ROOT), **extra)


def start_worker(
    settings: Settings,
    worker_id: str,
    log: Path,
    *args: str,
    app: str = "examples.refund_agent:app",
    module: str = "runtime.cli",  # or a module that wraps it (bench/seal_timing.py)
    **env: str,
) -> subprocess.Popen[bytes]:
    wrapper = os.environ.get("BENCH_WORKER_WRAPPER", "").split()  # e.g. "py-spy record -o prof.svg --"
    if os.environ.get("BENCH_LIMITS_FAR") == "1":  # the same app, with limits far away (bench/limits_far.py)
        app = {
            "examples.refund_agent:app": "bench.limits_far:refund",
            "bench.e2e_app:app": "bench.limits_far:e2e",
        }.get(app, app)
    return subprocess.Popen(
        [
            *wrapper,
            sys.executable,
            "-m",
            module,
            "worker",
            "--app",
            app,
            "--worker-id",
            worker_id,
            *args,
        ],
        cwd=ROOT,
        env=env_for(settings, **env),
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
