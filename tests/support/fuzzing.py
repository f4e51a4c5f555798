"""Fuzzed input for a worker on the in-memory log: command values, submission JSON, workflow inputs.

A ``FuzzDeployment`` runs one real ``Worker`` (the production command handler, machine and
executor) in a thread of its own, over a ``MemoryLog`` of 4 partitions with an offline serde. A
case is one record produced to the commands topic; its outcome is read back from the events the
worker wrote: every case must end with a reason (``RunRejected``, ``RunFailed``) or completed,
the worker must stay up, and no partition may stall (every case's outcome arrives).

The strategies (``cases``) mix what a hostile or careless producer sends: random bytes, a
RunSubmitted frame with a corrupt datum, RunSubmitted records with fuzzed workflow names and
fuzzed JSON text, valid submissions whose input is any JSON value (the result must equal it),
records without a key, with a key that is not UTF-8, and on the wrong partition.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.port.partitioning import partition_for, partition_of_key
from runtime.log.records.events import RunCompleted, RunFailed, RunRejected, RunStarted, RunSubmitted
from runtime.log.schemas.frame import frame_header
from runtime.log.schemas.serde import Serde
from runtime.worker.commands import keyless_run_id
from runtime.worker.loop import Worker
from runtime.workflow.app import App
from runtime.workflow.canonical import canonical_json
from runtime.workflow.context import Context
from support.wait import wait_until

PARTITIONS = 4


def fuzz_app() -> App:
    app = App("fuzz")

    @app.tool("echo")
    def echo(value: Any) -> Any:
        return value

    @app.workflow("echo")
    async def echo_workflow(ctx: Context, value: Any) -> Any:
        return await ctx.tool("echo", value=value)

    @app.workflow("order")
    async def order(ctx: Context, request: dict[str, Any]) -> Any:
        # Workflow code that trusts its input: a missing or odd field fails the run, with the reason.
        return await ctx.tool("echo", value={"order": str(request["order"]), "n": int(request.get("n", 1))})

    return app


@dataclass(frozen=True)
class Case:
    """One record to produce: where, its key and value, and what it should end as."""

    kind: str
    key: bytes | None
    value: bytes
    wrong_partition: bool = False
    expect_result: Any = None  # for "input": the run must complete with this result
    expect_result_set: bool = False


JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=20,
)


def _submitted(serde: Serde, workflow: str, text: str) -> bytes:
    return serde.encode(RunSubmitted(run_id="", workflow=workflow, input=text, occurred_at=1))


def cases(serde: Serde) -> st.SearchStrategy[Case]:
    """One fuzzed command (see the module docstring)."""
    run_submitted_id = next(i for i, name in _ids(serde).items() if name == "RunSubmitted")
    raw_values = st.binary(max_size=200).map(lambda b: Case("raw-bytes", None, b))
    corrupt_datum = st.binary(max_size=120).map(
        lambda b: Case("corrupt-datum", None, frame_header(run_submitted_id) + b)
    )
    workflow_names = st.sampled_from(["echo", "order", "Echo", "", "echo ", "nope"]) | st.text(max_size=20)
    json_text = (
        st.text(max_size=80)
        | JSON_VALUES.map(canonical_json)
        | st.sampled_from(
            [
                '{"order": ',
                "{}",
                "[]",
                "null",
                '{"order": 1e999}',
                '{"order": "\\ud800"}',
                "NaN",
                '{"order": {}}',
            ]
        )
    )
    fuzzed_submissions = st.tuples(workflow_names, json_text).map(
        lambda wt: Case("submission", None, _submitted(serde, wt[0], wt[1]))
    )
    inputs = JSON_VALUES.map(
        lambda v: Case(
            "input",
            None,
            _submitted(serde, "echo", canonical_json(v)),
            expect_result=json.loads(canonical_json(v)),
            expect_result_set=True,
        )
    )
    orders = st.dictionaries(st.sampled_from(["order", "n", "x"]), JSON_LEAVES, max_size=3).map(
        lambda d: Case("order-input", None, _submitted(serde, "order", canonical_json(d)))
    )
    body = st.one_of(raw_values, corrupt_datum, fuzzed_submissions, inputs, orders)
    keys = st.sampled_from(
        ["run-id", "run-id", "run-id", "run-id", "none", "empty", "not-utf8", "wrong-partition"]
    )
    return st.tuples(body, keys, st.binary(min_size=1, max_size=8)).map(lambda t: _keyed(*t))


def _keyed(case: Case, key_kind: str, noise: bytes) -> Case:
    if key_kind == "none":
        return Case(case.kind + "/no-key", None, case.value)
    if key_kind == "empty":
        return Case(case.kind + "/empty-key", b"", case.value)
    if key_kind == "not-utf8":
        return Case(case.kind + "/not-utf8-key", b"\xff\xfe" + noise, case.value)
    # b"?": the deployment gives each such case a fresh run id (a repeated id is a duplicate, ignored)
    wrong = key_kind == "wrong-partition"
    return Case(
        case.kind + ("/wrong-partition" if wrong else ""),
        b"?",
        case.value,
        wrong_partition=wrong,
        expect_result=case.expect_result,
        expect_result_set=case.expect_result_set,
    )


def _ids(serde: Serde) -> dict[int, str]:
    return dict(serde._names_by_id)


class FuzzDeployment:
    """One worker in a thread over an in-memory log; produce cases, wait for their outcomes."""

    def __init__(self) -> None:
        self.settings = Settings(partitions=PARTITIONS)
        self.log = MemoryLog(self.settings)
        self.serde = Serde.offline(self.settings)
        self.worker = Worker(fuzz_app(), self.settings, log=self.log, serde=self.serde, worker_id="fuzz")
        self._stop = asyncio.Event()
        self._loop = asyncio.new_event_loop()
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="fuzz-worker", daemon=True)
        self._thread.start()
        self._next_id = 0
        self._scanned = [0] * PARTITIONS
        self.outcomes: dict[str, Any] = {}  # run id -> its ending event
        self.counts: Counter[str] = Counter()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.worker.serve(self._stop))
        except BaseException as error:  # the worker died: the fuzz run fails on it
            self.failure = error

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)

    def produce(self, case: Case) -> str:
        """Produce ``case``; the run id its outcome is recorded under."""
        topic = self.settings.commands_topic
        if case.key == b"?":
            self._next_id += 1
            run_id = f"fz-{self._next_id}"
            home = partition_for(run_id, PARTITIONS)
            partition = (home + 1) % PARTITIONS if case.wrong_partition else home
            self.log.append(topic, partition, run_id.encode(), case.value).result(timeout=10)
            return run_id
        if case.key:  # not UTF-8: its home by its bytes
            partition = partition_of_key(case.key, PARTITIONS)
        else:
            self._next_id += 1
            partition = self._next_id % PARTITIONS
        offset = self.log.append(topic, partition, case.key, case.value).result(timeout=10)
        return keyless_run_id(partition, offset, PARTITIONS)

    def _scan(self) -> None:
        for partition in range(PARTITIONS):
            records = self.log.read(self.settings.events_topic, partition, start=self._scanned[partition])
            for record in records:
                self._scanned[partition] = record.offset + 1
                event = self.serde.decode(record.value or b"", record.key)
                if isinstance(event, (RunCompleted, RunFailed, RunRejected)):
                    self.outcomes[event.run_id] = event
                elif isinstance(event, RunStarted):
                    self.counts["started"] += 1

    def check(self, batch: list[tuple[Case, str]], timeout: float = 30.0) -> None:
        """Wait until every case of ``batch`` has ended; AssertionError naming the first that
        did not (a stalled partition) or ended without a reason, or if the worker died."""

        def missing() -> list[tuple[Case, str]]:
            return [(case, run) for case, run in batch if run not in self.outcomes]

        def all_ended() -> bool:
            if self.failure is not None or not self._thread.is_alive():
                raise AssertionError(f"the worker died: {self.failure!r}")
            self._scan()
            return not missing()

        def first_missing() -> str:
            (case, run), *_ = missing()
            return f"{len(missing())} case(s) never ended, e.g. {case.kind} as run {run}: {case!r}"

        wait_until(all_ended, timeout, "every case of the batch to end", interval=0.002, detail=first_missing)
        for case, run in batch:
            ended = self.outcomes[run]
            if isinstance(ended, RunRejected):
                assert ended.reason, (case, ended)
                self.counts["rejected"] += 1
            elif isinstance(ended, RunFailed):
                assert ended.error, (case, ended)
                self.counts["failed"] += 1
            else:
                self.counts["completed"] += 1
                if case.expect_result_set:
                    assert json.loads(ended.result) == case.expect_result, (case, ended.result)
            self.counts[f"kind:{case.kind}"] += 1
            self.counts["cases"] += 1
