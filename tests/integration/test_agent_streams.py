"""A PydanticAI agent's ``run_stream`` and an OpenAI Agents SDK agent's ``run_streamed`` inside a
workflow reach ``Client.stream`` from a real worker subprocess: the lookup call's arguments and the
answer's text arrive as deltas, in order, each request's first piece while its call is still open.
The worker is then killed (``kill -9``) while the run waits for a signal; the next worker replays
the agent's steps to go on, and publishes nothing new for them: no delta, no attempt, nothing
superseded. A watcher that joins after the crash sees each step once and no deltas of calls whose
outcome the history holds."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from runtime.client import Client, StreamEvent
from runtime.config import Settings
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration

# (worker app, workflow): the same agent -- a lookup, then a three-piece answer -- on each framework.
AGENTS = {
    "pydantic_ai": ("support.stream_agent_apps:app", "agent_stream"),
    "openai_agents": ("support.stream_sdk_apps:app", "sdk_stream"),
}


class Watcher:
    """``client.stream(run)`` read in a thread of its own, into a list the test polls."""

    def __init__(self, client: Client, run_id: str) -> None:
        self.events: list[StreamEvent] = []
        self.error: BaseException | None = None
        self._stream = client.stream(run_id)
        self._done = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for event in self._stream:
                self.events.append(event)
        except BaseException as error:  # handed to the test
            self.error = error
        finally:
            self._done.set()

    def ended(self, timeout: float = 60) -> list[StreamEvent]:
        assert self._done.wait(timeout), f"the stream did not end; it showed {[e.kind for e in self.events]}"
        if self.error is not None:
            raise self.error
        return self.events


def _deltas(events: list[StreamEvent], kind: str) -> str:
    return "".join(str(e.data["text"]) for e in events if e.kind == "delta" and e.data["kind"] == kind)


@pytest.mark.parametrize("framework", sorted(AGENTS))
def test_an_agent_s_streamed_run_reaches_client_stream_and_a_replay_publishes_nothing(
    framework: str, deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    app, workflow = AGENTS[framework]
    first = WorkerProcess(deployment, app, "w1", tmp_path / "w1.log", TEST_STREAM_DIR=str(tmp_path))
    workers.append(first)
    first.wait_ready(deployment.partitions)
    with Client(deployment) as client:
        run = client.submit(workflow, {"order": "A-1"}).run_id
        watcher = Watcher(client, run)
        seen = lambda kind: _deltas(watcher.events, kind)  # noqa: E731
        # Each request's first piece arrives while its call is still open (it waits for release).
        wait_until(
            lambda: seen("tool_args") == '{"order": ',
            60,
            "the lookup's first arguments",
            detail=first.log_tail,
        )
        assert not any(e["type"] == "ModelCallCompleted" for e in client.run(run).history())
        (tmp_path / "release-1").touch()
        wait_until(lambda: seen("text") == "refund ", 30, "the answer's first piece")
        assert sum(e["type"] == "ModelCallCompleted" for e in client.run(run).history()) == 1
        (tmp_path / "release-2").touch()
        wait_until(lambda: seen("text") == "refund 41.60", 30, "the answer's deltas")
        wait_until(
            lambda: sum(e["type"] == "ModelCallCompleted" for e in client.run(run).history()) == 2,
            30,
            "the agent's two model calls recorded",
        )
        assert seen("tool_args") == '{"order": "A-1"}'
        before = list(watcher.events)
        model_positions = sorted({e.position for e in before if e.kind == "delta"})
        assert len(model_positions) == 2, [(e.kind, e.position) for e in before]

        first.kill()  # kill -9 while the run waits for its signal
        second = WorkerProcess(deployment, app, "w2", tmp_path / "w2.log", TEST_STREAM_DIR=str(tmp_path))
        workers.append(second)
        second.wait_ready(deployment.partitions, timeout=60)
        client.run(run).signal("go", True)
        assert client.run(run).result(timeout=60)["output"] == "refund 41.60"
        events = watcher.ended()
        late = Watcher(client, run).ended()

    after = events[len(before) :]
    replayed = [(e.kind, e.position) for e in after if e.position in model_positions]
    assert replayed == [], f"the replay published {replayed}"
    assert [e.kind for e in after if e.kind in ("delta", "attempt", "superseded")] == []
    assert after and after[-1].kind == "ended"
    # A watcher joining after the crash: each step once, no deltas of calls the history has ended.
    steps = [(e.kind, e.position) for e in late if e.kind != "delta"]
    assert len(steps) == len(set(steps)), steps
    assert not [e for e in late if e.kind == "delta" and e.position in model_positions]
    print(
        f"\nbefore the kill: {len(before)} stream events; after it: {[(e.kind, e.position) for e in after]}"
    )
