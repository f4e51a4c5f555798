"""RunMachine.apply: one handler per event record type, chosen by the record's class."""

from __future__ import annotations

import pytest

from runtime.log.records.events import EVENT_TYPES, TERMINAL_TYPES, RunRejected
from runtime.workflow import machine
from runtime.workflow.machine import SCHEDULED_TYPES, RunMachine

pytestmark = pytest.mark.unit


def test_every_event_type_has_a_handler() -> None:
    assert set(machine._APPLY) == set(EVENT_TYPES)


def test_records_matched_at_issue_and_endings_have_their_handlers() -> None:
    assert {machine._APPLY[t] for t in SCHEDULED_TYPES} == {RunMachine._matched_at_issue}
    # A rejected submission never had a machine: its record ends nothing a machine drives.
    endings = [t for t in TERMINAL_TYPES if t is not RunRejected]
    assert {machine._APPLY[t] for t in endings} == {RunMachine._apply_ending}
