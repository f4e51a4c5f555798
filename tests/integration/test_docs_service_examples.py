"""The documentation's programs that need the real services run whole here
(tests/unit/test_docs_examples.py runs the in-memory ones)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.config import Settings
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration


def test_client_usage_program_runs(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    from examples.docs import client_usage

    worker = WorkerProcess(deployment, "examples.docs.client_usage:app", "docs-w1", tmp_path / "worker.log")
    workers.append(worker)
    worker.wait_ready(deployment.partitions)
    client_usage.main(deployment)  # its asserts are what the pages claim


def test_watching_program_runs(deployment: Settings, workers: list[WorkerProcess], tmp_path: Path) -> None:
    from examples.docs import watching

    worker = WorkerProcess(deployment, "examples.docs.watching:app", "docs-w2", tmp_path / "worker.log")
    workers.append(worker)
    worker.wait_ready(deployment.partitions)
    watching.main(deployment)  # its asserts are what the page claims
