"""A what-if's forks: where each selected run is cut, its fork's derived id, and the forks started a window at a time.

Each selected run is forked (``RunHandle.fork``: effects dry, the original untouched) at the first
model call the change touches, or from the start for new code; a run the change does not touch is
not forked. A fork's id derives from the what-if and its origin, so resuming a what-if never starts
a second fork of a run (the worker ignores a submission of an id it holds). Forks are started
at most ``window`` at a time (the next starts as the oldest running one ends): a what-if holds at
most that many runs in the workers at once, and its model calls wait for the deployment's limits like any other,
so production runs submitted meanwhile are not queued behind the whole what-if.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from runtime.client import Client
from runtime.client.endings import RunError
from runtime.client.resets import SEED_LIMIT
from runtime.log.records.events import Event
from runtime.replay.reset import SeedError, cut, encode_seed
from runtime.whatif.change import Change, ChangeError

DEFAULT_WINDOW = 8


def fork_id(whatif_id: str, origin: str) -> str:
    """The id of the what-if's fork of run ``origin``: the same on every resume."""
    return f"{origin}.whatif.{whatif_id}"


@dataclass(frozen=True)
class PlannedRun:
    """One selected run and its fork (None where the change touches none of its calls)."""

    index: int
    origin: str
    position: int | None  # the fork's first live position

    def fork_of(self, whatif_id: str) -> str | None:
        return None if self.position is None else fork_id(whatif_id, self.origin)


def plan(
    change: Change, origins: Sequence[str], histories: Mapping[str, Sequence[Event]]
) -> list[PlannedRun]:
    """Where each of ``origins`` is forked, from its recorded history. Raises ChangeError naming the
    run if its history cannot be cut there (a call in doubt before it) or is too large to copy
    into one submission: refused before any fork starts, not halfway through."""
    planned = [
        PlannedRun(i, origin, change.fork_position(histories[origin])) for i, origin in enumerate(origins)
    ]
    for item in planned:
        if item.position is None:
            continue
        try:
            size = len(encode_seed(cut(list(histories[item.origin]), item.position)))
        except SeedError as error:
            raise ChangeError(
                f"run {item.origin} cannot be forked at position {item.position}: {error}"
            ) from error
        if size > SEED_LIMIT:
            raise ChangeError(
                f"run {item.origin} before position {item.position} is {size} bytes of history, over the "
                f"{SEED_LIMIT}-byte limit of one submission: leave it out of the what-if"
            )
    return planned


def run_forks(
    client: Client,
    whatif_id: str,
    change: Change,
    planned: Sequence[PlannedRun],
    *,
    started: Collection[str] = (),
    window: int = DEFAULT_WINDOW,
    timeout: float = 300.0,
    progress: Callable[[str], None] | None = None,
    histories: Mapping[str, list[Event]] | None = None,
) -> None:
    """Start the forks of ``planned`` not among ``started`` (fork ids the log already holds),
    at most ``window`` running at once, and wait for all to end. The first planned run carries the
    whole plan in its change, so the plan is in the log with the what-if's first record. Raises
    RunError if a fork has not ended within ``timeout`` (the what-if can be resumed), AgentlogError
    if a run cannot be forked (what ``RunHandle.fork`` raises). ``histories``: the originals'
    events as already read (payloads inlined), to cut the forks' seeds from without reading them again."""
    plan_ids = tuple(p.origin for p in planned)
    todo = [p for p in planned if p.position is not None]
    width = max(1, window)

    def start(item: PlannedRun) -> str:
        new_id = item.fork_of(whatif_id)
        assert new_id is not None and item.position is not None
        if new_id not in started:
            recorded = change.for_run(whatif_id, item.index, plan_ids if item is todo[0] else ())
            history = histories.get(item.origin) if histories is not None else None
            client.run(item.origin).fork(item.position, {}, new_id=new_id, whatif=recorded, history=history)
        return new_id

    # A sliding window, waited for in order: fork i + window starts once fork i has ended.
    forks = [start(item) for item in todo[:width]]
    for index, new_id in enumerate(forks):
        _wait(client, new_id, timeout)
        if progress is not None:
            progress(new_id)
        if index + width < len(todo):
            forks.append(start(todo[index + width]))


def _wait(client: Client, run_id: str, timeout: float) -> None:
    """Until the fork has ended; one that failed or was cancelled has ended too (the report says so)."""
    try:
        client.run(run_id).result(timeout=timeout)
    except RunError as error:
        if error.status == "timeout":
            raise
