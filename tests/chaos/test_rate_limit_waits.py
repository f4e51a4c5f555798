"""A provider's rate limit is a wait, not a failure, and the wait is durable: a model call answered
429 "Please try again in 30s." is re-sent no earlier than 30 s later -- by the same worker, and by a
fresh worker that took the run over after the first was SIGKILLed during the wait. Real Kafka and
registry, workers as subprocesses with the default retry policy, the model the tests' own
OpenAI-compatible server (support.model_endpoint), which keeps each request's arrival time.

Both runs wait their 30 s at the same time, so the module takes about 40 s, not 70: run A is
answered 429 by the first worker, which is killed once A's failure is in the log; run B is
submitted to its successor and answered 429 there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.log.records.events import Event, ModelCallCompleted, ModelCallFailed
from support.model_endpoint import Endpoint, model_endpoint
from support.wait import wait_for_event
from support.workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

WAIT_S = 30  # what the endpoint's 429 asks for
APP = "support.endpoint_app:app"


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    with model_endpoint() as served:
        yield served


@pytest.fixture
def client(deployment: Settings) -> Iterator[Client]:
    client = Client(deployment)
    try:
        yield client
    finally:
        client.close()


def _worker(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, endpoint: Endpoint
) -> WorkerProcess:
    worker = WorkerProcess(
        deployment, APP, "w1", tmp_path / f"w1-{len(workers)}.log", TEST_MODEL_URL=endpoint.url
    )
    workers.append(worker)
    return worker


def _records(client: Client, run_id: str) -> list[Event]:
    return [
        logged.event
        for logged in client.run(run_id).events()
        if isinstance(logged.event, (ModelCallFailed, ModelCallCompleted))
    ]


def _requests(endpoint: Endpoint, order: str) -> list[dict[str, Any]]:
    return [r for r in endpoint.requests if f"order {order}" in str(r["body"]["messages"])]


def test_a_429_is_re_sent_no_earlier_than_it_asks_also_across_a_worker_restart(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, endpoint: Endpoint, client: Client
) -> None:
    first = _worker(deployment, workers, tmp_path, endpoint)
    first.wait_ready(3)
    restarted = client.submit("ask", {"order": "A", "text": f"rate-limit-{WAIT_S}"}).run_id
    client.flush()
    wait_for_event(client, restarted, "ModelCallFailed")
    first.kill()  # during the wait, after its failure record is durable
    second = _worker(deployment, workers, tmp_path, endpoint)
    second.wait_ready(3)
    stayed = client.submit("ask", {"order": "B", "text": f"rate-limit-{WAIT_S}"}).run_id
    client.flush()
    wait_for_event(client, stayed, "ModelCallFailed")
    (waiting,) = client.run(stayed).status().retrying  # what `agentlog status` shows meanwhile
    assert (waiting.kind, waiting.name, waiting.attempt) == ("model", "planner", 1)
    assert "rate limited, retrying at" in waiting.describe(waiting.retry_at - 25_000)

    for run_id in (restarted, stayed):
        assert client.run(run_id).result(timeout=WAIT_S + 30) == "refund 41.60", second.log_tail()

    for order, run_id, attempt in (("A", restarted, 3), ("B", stayed, 2)):
        # the endpoint saw the 429, then exactly one re-send, no earlier than the wait it asked for
        limited, resent = _requests(endpoint, order)
        assert (limited["status"], resent["status"]) == (429, 200)
        assert resent["at"] - limited["at"] >= WAIT_S, (order, resent["at"] - limited["at"])
        # the log holds the attempt, the wait asked for and when the next attempt could start
        failure, done = _records(client, run_id)
        assert isinstance(failure, ModelCallFailed) and isinstance(done, ModelCallCompleted)
        assert failure.error_type == "ModelRateLimited" and not failure.final and failure.attempt == 1
        assert f"(asks to wait {WAIT_S} s)" in failure.error and "Please try again in 30s" in failure.error
        # asked after the 429 arrived, recorded after it was asked (the same machine's clock; the
        # worker's ms are floored and retry_at is one ms later for it)
        assert (
            limited["at"] * 1000 + WAIT_S * 1000
            <= failure.retry_at
            <= failure.occurred_at + WAIT_S * 1000 + 1
        )
        assert resent["at"] * 1000 >= failure.retry_at  # not sent before the recorded time
        # A's successor counts an attempt its predecessor may have had in flight (the call is in doubt)
        assert done.attempt == attempt
