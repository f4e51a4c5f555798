"""A finished run that another client submitted answers ``result`` and ``status`` from the run
index (runtime.log.records.run_index) without scanning its events partition; an index entry of the old
form b"1", or one pointing at the wrong records, falls back to the scan."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.topics import ensure_topics
from runtime.client import Client
from runtime.config import Settings
from runtime.log.records.run_index import RunLocation, run_key
from support.rebuilds import without_checkpoints
from support.services import make_deployment
from support.wait import wait_until
from support.workers import WorkerProcess, start_worker

pytestmark = pytest.mark.integration

OTHER_RUNS = 60  # each of 5 steps: 12 records, ~720 records of other runs before the one read


def finished_run(
    services: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> tuple[Settings, str, RunLocation, int]:
    """A one-partition deployment, the runs before it finished, and one run ``mine`` finished after
    them and located by the index: (deployment, run id, its location, the partition's end)."""
    deployment = make_deployment(services, partitions=1)
    start_worker(deployment, workers, tmp_path)
    with Client(deployment) as submitter:
        others = [submitter.submit("short", {"order": f"o{i}", "steps": 5}).run_id for i in range(OTHER_RUNS)]
        submitter.results(others, timeout=120)
        mine = submitter.submit("short", {"order": "mine"})
        assert mine.result(timeout=60) == "mine"
        wait_until(
            lambda: (found := mine.location()) is not None and found.end is not None,
            timeout=60,
            interval=0.2,
            what="the run's ending located in the index (the worker's next checkpoint)",
        )
        location = mine.location()
        end = submitter.log.watermarks(deployment.events_topic, 0)[1]
    assert location is not None
    return deployment, mine.run_id, location, end


def test_a_finished_run_answers_result_and_status_from_the_index(
    services: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    deployment, run_id, location, end = finished_run(services, workers, tmp_path)
    assert location.first > OTHER_RUNS * 10  # the other runs' records lie before it
    with Client(deployment) as reader:
        assert reader.run(run_id).result(timeout=5) == "mine"
        assert reader.events_records_read == 1  # the ending event alone
        status = reader.run(run_id).status()
        assert status.status == "completed" and status.result == "mine"
        assert reader.events_records_read <= 1 + (location.end or 0) - location.first + 1
        history = reader.run(run_id).history()
    ensure_topics(without_checkpoints(deployment))
    with Client(without_checkpoints(deployment)) as scanner:  # the same reads, scanning
        assert scanner.run(run_id).status() == status
        assert scanner.run(run_id).history() == history
        assert scanner.events_records_read >= end - 1


def test_an_old_index_entry_or_a_wrong_pointer_falls_back_to_the_scan(
    services: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    deployment, run_id, location, end = finished_run(services, workers, tmp_path)
    old_form = without_checkpoints(deployment)
    ensure_topics(old_form)
    with Client(old_form) as reader:
        reader.log.append(old_form.checkpoints_topic, 0, run_key(run_id), b"1").result(timeout=30)
        assert reader.run(run_id).location() is None
        assert reader.run(run_id).result(timeout=5) == "mine"
        assert reader.run(run_id).status().status == "completed"
        assert reader.events_records_read >= end - 1
    with Client(deployment) as located:
        expected = located.run(run_id).status()
    wrong = RunLocation(location.first - 12, location.first - 1)  # another run's records
    with Client(deployment) as reader:
        reader.log.append(deployment.checkpoints_topic, 0, run_key(run_id), wrong.encode()).result(timeout=30)
        assert reader.run(run_id).location() == wrong
        assert reader.run(run_id).result(timeout=5) == "mine"
        assert reader.run(run_id).status() == expected
        assert reader.events_records_read >= end - 1
