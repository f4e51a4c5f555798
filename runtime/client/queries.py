"""Queries: the state a run exposed (``ctx.expose``), read at once from the compacted exposed topic.

The worker publishes a run's exposed values whole, keyed by run id, in the run's partition
(runtime.worker.streaming), each time its code changes them live. A query reads that partition
backwards from its end, a window at a time, and takes the first record of the run it meets: the
latest. Compaction keeps the partition near one record per run, and a running run's latest value is
near the end, so a query reads a window or two -- without the run, its worker or a signal.
Why a topic of its own and not the stream: the stream's retention is an hour, a run waits for days.
"""

from __future__ import annotations

import json
from typing import Any

from runtime.client.reading import RunReader
from runtime.client.streaming import UnknownRun, history_of
from runtime.errors import AgentlogError

WINDOW = 2_000  # records read per step backwards


class QueryError(AgentlogError):
    """The run exposes no value under the name asked for; the message names those it has."""


def exposed_state(reader: RunReader, run_id: str) -> dict[str, str] | None:
    """The run's latest exposed values (name -> JSON text), or None if it exposed none."""
    topic = reader.settings.exposed_topic
    partition = reader.partition(run_id)
    key = run_id.encode()
    low, high = reader.log.watermarks(topic, partition)
    while high > low:
        start = max(low, high - WINDOW)
        latest = None
        for record in reader.log.read(topic, partition, start=start, end=high, keep=lambda k: k == key):
            if record.value is not None:
                latest = record.value
        if latest is not None:
            state = json.loads(latest)["state"]
            return {str(name): str(value) for name, value in state.items()}
        high = start
    return None


def query(reader: RunReader, run_id: str, name: str) -> Any:
    """The latest value run ``run_id`` exposed under ``name`` (decoded JSON). UnknownRun for a run
    never submitted, QueryError (naming the names it has) for a name it never exposed."""
    state = exposed_state(reader, run_id)
    if state is None:
        try:
            history_of(reader, run_id, wait_s=0.0)
        except UnknownRun:
            raise
        except AgentlogError:
            pass  # submitted, not started yet: it has exposed nothing
        raise QueryError(
            f"run {run_id!r} exposes no {name!r}: it has exposed nothing (yet); workflow code exposes "
            "state with ctx.expose(name, value)"
        )
    if name not in state:
        raise QueryError(f"run {run_id!r} exposes no {name!r}; it exposes: {', '.join(sorted(state))}")
    return json.loads(state[name])
