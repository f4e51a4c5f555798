"""The submission that resets or forks a run: a new run seeded with the recorded history before a position."""

from __future__ import annotations

from typing import Any

from runtime.client.reading import RunReader
from runtime.errors import AgentlogError
from runtime.log.records.events import Event, RunStarted, RunSubmitted
from runtime.replay.reset import SeedError, UncleanSeam, cut, encode_seed
from runtime.run_status import summarize
from runtime.workflow.canonical import canonical_json

# A submission is one Kafka record (1 MB by default); the seed leaves room for the rest.
SEED_LIMIT = 900_000


def seeded_submission(
    reader: RunReader,
    run_id: str,
    position: int,
    new_id: str,
    *,
    allow_in_doubt: bool,
    fork_overrides: dict[str, Any] | None,
    history: list[Event] | None = None,
) -> tuple[RunSubmitted, bool]:
    """The submission of run ``new_id`` from ``run_id``'s recorded history before ``position``
    (runtime.replay.reset), and whether ``run_id`` is still running (a reset cancels it first).
    Raises AgentlogError if the run has no RunStarted, ``position`` is outside its history, a
    stored result is missing, or the history before ``position`` is too large for one
    submission, and (``UncleanSeam``) if ``position`` cuts between a call's Scheduled record and
    its outcome -- unless ``allow_in_doubt``. ``history``: the run's events as already read, with
    their payloads (a what-if forks many runs it has read): not read again."""
    logged = reader.logged(run_id, reader.location(run_id)) if history is None else []
    events = history if history is not None else reader.with_payloads(run_id, [e.event for e in logged])
    started = next((e for e in events if isinstance(e, RunStarted)), None)
    if started is None:
        raise AgentlogError(f"run {run_id} has no RunStarted in the log: nothing to reset")
    try:
        seed = encode_seed(cut(events, position, allow_in_doubt=allow_in_doubt))
    except UncleanSeam:
        raise
    except SeedError as error:
        raise AgentlogError(str(error)) from error
    if len(seed) > SEED_LIMIT:
        raise AgentlogError(
            f"run {run_id} before position {position} is {len(seed)} bytes of history, over the "
            f"{SEED_LIMIT}-byte limit of one submission: reset to an earlier position"
        )
    running = history is None and summarize(run_id, logged).status == "running"
    submission = RunSubmitted(
        run_id=new_id,
        workflow=started.workflow,
        input=started.input,
        reset_from=run_id,
        reset_position=position,
        key_root=started.key_root or run_id,
        seed=seed,
        fork_overrides=None if fork_overrides is None else canonical_json(fork_overrides),
    )
    return submission, running
