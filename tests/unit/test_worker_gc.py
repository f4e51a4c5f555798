"""The worker command pauses the cyclic collector while it starts (what start-up allocates lives as
long as the process); a worker that runs with ``tune_gc`` freezes what start-up loaded and turns
collection back on, at its own threshold -- a worker left without collection would grow forever."""

from __future__ import annotations

import gc
import threading

import pytest

from runtime.worker.loop import Worker
from runtime.workflow.app import App
from support.memory_harness import Harness
from support.wait import wait_until

pytestmark = pytest.mark.unit


def test_a_worker_run_with_tune_gc_turns_collection_back_on() -> None:
    h = Harness(App("gc"))
    worker = Worker(h.app, h.settings, log=h.log, serde=h.serde, worker_id="w1")
    threshold = gc.get_threshold()
    gc.disable()  # as `agentlog worker` leaves it while it imports
    serving = threading.Thread(target=worker.run, kwargs={"tune_gc": True}, daemon=True)
    try:
        serving.start()
        wait_until(gc.isenabled, 10, "the worker to turn collection back on", interval=0.01)
        assert gc.get_threshold()[0] == 200_000 and gc.get_freeze_count() > 0
    finally:
        worker.stop()
        serving.join(timeout=10)
        gc.unfreeze()
        gc.set_threshold(*threshold)
        gc.enable()
    assert not serving.is_alive()
