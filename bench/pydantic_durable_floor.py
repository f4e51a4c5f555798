"""The floor PydanticAI's own durable-execution layer puts under any integration built on it, with
no engine at all: the 40-step agent of ``make compare-agents`` (bench/peers/agent_workload.py) run
in one process, plain and through ``pydantic_ai.durable_exec`` as its maintainers' guide asks
(``durable_exec/AGENTS.md``: a ``BaseDurabilityCapability`` subclass declaring its engine once in a
``DurabilityEngineSpec``, and a ``CallableOperationBackend`` whose ``execute`` runs each durable
unit), so a ratio to plain PydanticAI can be told apart from what an engine adds.

Variants, measured interleaved in one process (each round runs every variant, in a rotated order):

- ``plain``: no durability (what bench/peers/agent_plain.py measures);
- ``noop``: the minimal conforming capability, ``IDENTITY_CODEC``; its backend runs each unit's
  body in-process and records nothing;
- ``json-out``: as ``noop`` but with ``JSON_CODEC`` (the codec a JSON-journal engine declares: the
  base dumps each unit's result inside the unit and validates it outside), and the backend keeps
  each result's JSON bytes in a list -- what a journal that replays from outputs alone must do;
- ``json-io``: as ``json-out``, and each unit's inputs (a model request's messages, settings and
  request parameters; a tool call's name and arguments) are also reduced with ``JSON_CODEC`` and
  kept as bytes -- a journal that also records what each call was asked, as agentlog's does.

Each variant reports L (median wall ms a step of one run at a time, as agent_plain's L) and CPU ms
a step over a batch of concurrent runs (``time.process_time`` of the process, as agent_plain's T
stretch), then its ratios to ``plain`` of the same round; the summary gives the medians over rounds
(and the fastest single run of each variant, the least disturbed by other work on the machine).

    cd <checkout> && PYTHONPATH=. .venv/bin/python bench/pydantic_durable_floor.py
    ... bench/pydantic_durable_floor.py --rounds 5 --l-runs 7 --t-runs 30   # the defaults
    py-spy record -r 200 -f raw -o noop.txt -- .venv/bin/python bench/pydantic_durable_floor.py \
        --profile noop --seconds 20     # one variant alone, in batches of --t-runs, for a profiler

No services: the tools commit to a SQLite file in a temporary directory (``E2E_DB``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import pydantic_ai
import pydantic_core
from pydantic_ai.durable_exec import (
    IDENTITY_CODEC,
    JSON_CODEC,
    BaseDurabilityCapability,
    CallableOperationBackend,
    DurabilityCodec,
    DurabilityEngineSpec,
    DurableOperationBackend,
    DurableOperationId,
    JournalOperationNamer,
    ModelRequestId,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
)
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.tools import AgentDepsT

# The durable container: set around a run as an engine's workflow context is.
_in_container: ContextVar[bool] = ContextVar("floor_in_container", default=False)
_NO_CONFIG = RoleBasedOperationConfig[None](model=None, event=None, capability=None, tool=None)


def _spec(codec: DurabilityCodec) -> DurabilityEngineSpec:
    """The engine declared once, as the guide asks; only the codec differs between variants."""
    return DurabilityEngineSpec(
        engine_name="floor",
        durable_unit_noun="unit",
        durable_container_noun="container",
        codec=codec,
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={"function": "enter-always", "mcp": "enter-always", "dynamic": "enter-never"},
        journal_discovery=True,
        sequential_tools_in_durable_context=False,
    )


@contextlib.contextmanager
def container() -> Iterator[None]:
    token = _in_container.set(True)
    try:
        yield
    finally:
        _in_container.reset(token)


class _Backend(CallableOperationBackend[None]):
    """Runs each unit's body in-process; with ``journal``, keeps its result's JSON bytes (and with
    ``inputs``, its inputs' too) in that list."""

    def __init__(self, agent_name: str, journal: list[bytes] | None, inputs: bool) -> None:
        super().__init__(
            namer=JournalOperationNamer(agent_name, default_model_id="default"), config=_NO_CONFIG
        )
        self.journal = journal
        self.inputs = inputs
        self.units = 0  # durable units executed, to show the runs did go through the backend

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: None,
    ) -> object:
        self.units += 1
        if self.journal is None:
            return await body()
        if self.inputs:
            self.journal.append(pydantic_core.to_json(_inputs(operation_id, name, cache_key)))
        payload = await body()  # already reduced to JSON-able values by the spec's JSON_CODEC
        self.journal.append(pydantic_core.to_json(payload))
        return payload


def _inputs(operation_id: DurableOperationId, name: str, cache_key: tuple[object, ...]) -> object:
    """What the unit was asked, as JSON-able values (through the same codec the spec declares)."""
    if isinstance(operation_id, ModelRequestId):
        _model_id, messages, settings, parameters, _ctx = cache_key
        return {
            "unit": name,
            "messages": JSON_CODEC.dump(list[ModelMessage], messages),
            "settings": JSON_CODEC.dump(dict[str, Any] | None, settings),
            "parameters": JSON_CODEC.dump(ModelRequestParameters, parameters),
        }
    if isinstance(operation_id, ToolsetCallToolId):
        return {"unit": name, "tool": cache_key[0], "args": JSON_CODEC.dump(dict[str, Any], cache_key[1])}
    return {"unit": name}  # validation, discovery: their results are what a replay needs


class _Floor(BaseDurabilityCapability[AgentDepsT]):
    engine_spec = _spec(IDENTITY_CODEC)
    journal: list[bytes] | None = None
    inputs = False

    def __init__(self) -> None:
        super().__init__()
        self._backend: _Backend | None = None

    @property
    def in_durable_context(self) -> bool:
        return _in_container.get()

    def get_durable_operation_backend(self) -> DurableOperationBackend[Any]:
        if self._backend is None:
            self._backend = _Backend(self.name, self.journal, self.inputs)
        return self._backend


class NoopDurability(_Floor[AgentDepsT]):
    """The minimal conforming capability: each unit runs its body, nothing is recorded."""


class JsonOutDurability(_Floor[AgentDepsT]):
    """JSON_CODEC; each unit's result kept as JSON bytes."""

    engine_spec = _spec(JSON_CODEC)

    def __init__(self) -> None:
        super().__init__()
        self.journal = []


class JsonIoDurability(JsonOutDurability[AgentDepsT]):
    """JSON_CODEC; each unit's inputs and result kept as JSON bytes."""

    inputs = True


VARIANTS: dict[str, Callable[[], _Floor[None] | None]] = {
    "plain": lambda: None,
    "noop": NoopDurability,
    "json-out": JsonOutDurability,
    "json-io": JsonIoDurability,
}


@dataclass
class Figures:
    l_ms: float  # median wall ms a step, one run at a time
    l_min: float  # the fastest of those runs: less of the other processes' noise in it
    cpu_ms: float  # process CPU ms a step over a batch of concurrent runs
    journal_bytes: int  # bytes journalled a step (json variants)
    units: float  # durable units a step (the capability variants)


class Variant:
    def __init__(self, name: str) -> None:
        from bench.peers.agent_workload import agent, run_key, tools

        self.name = name
        capability = VARIANTS[name]()
        self.capability = capability
        self.agent = agent(tools(run_key), [] if capability is None else [capability])
        bound = None if capability is None else type(capability).from_agent(self.agent)
        self.journal = None if bound is None else bound.journal
        self.backend = None if bound is None else bound.get_durable_operation_backend()

    async def one(self) -> None:
        from bench.peers.agent_workload import prompt

        with container():
            await self.agent.run(prompt(uuid.uuid4().hex[:20]))

    async def measure(self, l_runs: int, t_runs: int, idle_s: float) -> Figures:
        from bench.peers.agent_workload import STEPS

        await self.one()  # warm
        singles = []
        for _ in range(l_runs):
            await asyncio.sleep(idle_s)
            started = time.perf_counter()
            await self.one()
            singles.append((time.perf_counter() - started) * 1000 / STEPS)
        await asyncio.sleep(idle_s)
        before = 0 if self.journal is None else sum(map(len, self.journal))
        units_before = self.units()
        cpu_before = time.process_time()
        await asyncio.gather(*(self.one() for _ in range(t_runs)))
        cpu = time.process_time() - cpu_before
        journalled = 0 if self.journal is None else sum(map(len, self.journal)) - before
        if self.journal is not None:
            self.journal.clear()
        steps = t_runs * STEPS
        return Figures(
            statistics.median(singles),
            min(singles),
            cpu * 1000 / steps,
            journalled // steps,
            (self.units() - units_before) / steps,
        )

    def units(self) -> int:
        return 0 if not isinstance(self.backend, _Backend) else self.backend.units


async def profile(name: str, seconds: float, batch: int) -> None:
    """Only ``name``, in batches of concurrent runs for ``seconds``: for a profiler to attach to."""
    variant = Variant(name)
    await variant.one()
    print(f"profiling {name}: pid {os.getpid()}, {seconds} s", flush=True)
    deadline = time.monotonic() + seconds
    runs = 0
    while time.monotonic() < deadline:
        await asyncio.gather(*(variant.one() for _ in range(batch)))
        runs += batch
    print(f"{name}: {runs} runs", flush=True)


async def main_async(args: argparse.Namespace) -> None:
    if args.profile:
        await profile(args.profile, args.seconds, args.t_runs)
        return
    names = list(VARIANTS)
    variants = {name: Variant(name) for name in names}
    for variant in variants.values():  # every variant works, and warms PydanticAI's caches
        await variant.one()
    rounds: list[dict[str, Figures]] = []
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        figures = {name: await variants[name].measure(args.l_runs, args.t_runs, args.idle) for name in order}
        rounds.append(figures)
        base = figures["plain"]
        print(f"round {r + 1} (order {' '.join(order)})", flush=True)
        for name in names:
            f = figures[name]
            print(
                f"  {name:9} L {f.l_ms:6.3f} ms/step ({f.l_ms / base.l_ms:4.2f}x)  "
                f"CPU {f.cpu_ms:6.3f} ms/step ({f.cpu_ms / base.cpu_ms:4.2f}x)  journal {f.journal_bytes} B/step  "
                f"units {f.units:.2f}/step",
                flush=True,
            )
    print(f"medians over {args.rounds} rounds (ratios: median of each round's ratio to plain)")
    for name in names:
        l_ms = statistics.median(rnd[name].l_ms for rnd in rounds)
        cpu_ms = statistics.median(rnd[name].cpu_ms for rnd in rounds)
        l_x = statistics.median(rnd[name].l_ms / rnd["plain"].l_ms for rnd in rounds)
        best = min(rnd[name].l_min for rnd in rounds)
        best_x = best / min(rnd["plain"].l_min for rnd in rounds)
        cpu_x = statistics.median(rnd[name].cpu_ms / rnd["plain"].cpu_ms for rnd in rounds)
        print(
            f"{name:9} L {l_ms:6.3f} ms/step {l_x:4.2f}x plain   CPU {cpu_ms:6.3f} ms/step {cpu_x:4.2f}x plain"
            f"   fastest run {best:6.3f} ms/step {best_x:4.2f}x plain's",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--l-runs", type=int, default=7, help="single runs a variant a round (L)")
    parser.add_argument("--t-runs", type=int, default=30, help="concurrent runs a variant a round (CPU)")
    parser.add_argument("--idle", type=float, default=0.2, help="seconds idle before each timed run")
    parser.add_argument("--profile", choices=list(VARIANTS), help="run only this variant (for py-spy)")
    parser.add_argument("--seconds", type=float, default=20, help="how long --profile runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pydantic-floor-") as workdir:
        # read by bench/peers/workload.py when it is first imported (by Variant)
        os.environ["E2E_DB"] = os.path.join(workdir, "e2e.db")
        print(f"python {sys.version.split()[0]}, pydantic_ai {pydantic_ai.__version__}", flush=True)
        asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
