"""What a fresh `agentlog worker` process imports before its first record: its recovery time
starts with those imports, so what only an optional feature uses loads with that feature."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.services import ROOT

pytestmark = pytest.mark.unit

# The modules runtime.cli.runs._worker / _serve import on the way to Worker.run, and a Worker
# built on the in-memory log (its construction is part of the start too).
_START = (
    "import sys, runtime.cli.main, runtime.cli.runs, runtime.log.kafka.backend, runtime.log.schemas.serde, "
    "runtime.worker.loop; "
    "from runtime.config import load_settings; from runtime.log.port.memory import MemoryLog; "
    "from runtime.log.schemas.serde import Serde; from runtime.worker.loop import Worker; "
    "from runtime.workflow.app import App; "
    "settings = load_settings(); "
    "Worker(App('probe'), settings, log=MemoryLog(settings), serde=Serde(settings), worker_id='w'); "
    "print(sorted({m.split('.')[0] for m in sys.modules} & {'prometheus_client', 'opentelemetry'}))"
)


def test_a_worker_without_a_metrics_port_or_a_tracer_provider_starts_without_their_libraries() -> None:
    """prometheus-client loads with the metrics port (runtime.worker.ops), opentelemetry-api once
    something in the process has imported it (runtime.worker.tracing)."""
    done = subprocess.run(
        [sys.executable, "-c", _START], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
