"""Drives a RunMachine by hand for the pure-logic tests: answers what it asks, as a worker would."""

from __future__ import annotations

from collections.abc import Callable

from runtime.log.records.events import Event
from runtime.workflow.intents import Intent
from runtime.workflow.machine import RunMachine


def drive(
    machine: RunMachine,
    answer: Callable[[Intent], Event],
    history: list[Event],
    stop_after: int | None = None,
) -> list[Event]:
    """Append what the machine emits to ``history`` and answer each ready command with
    ``answer``, until the run ends or nothing is ready; ``stop_after`` answers is a crash."""
    answered = 0
    while machine.active:
        events, ready = machine.drain()
        history += events
        if not ready:
            break
        for command in ready:
            if stop_after is not None and answered >= stop_after:
                return history
            machine.record(answer(command))
            answered += 1
    history += machine.drain()[0]
    return history
