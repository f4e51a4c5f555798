"""The schedules, kept in a compacted topic of their own (``Settings.schedules_topic``, one partition).

Two keys per schedule, so that what a person writes and what a scheduler writes never overwrite
each other under compaction:
- ``schedule/<name>``: a ``ScheduleDefined``, the schedule as last added, paused or resumed;
- ``fired/<name>``: a ``ScheduleFired``, the latest fire time a scheduler handled, written once the
  firing's submission was acknowledged.
Deleting a schedule appends a tombstone to both. The values are Avro under registered schemas, as
every record agentlog keeps. A reader follows the partition from where it last read (``refresh``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import cast

from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.port.protocol import EventLog
from runtime.log.records.events import ScheduleDefined, ScheduleFired
from runtime.log.schemas.datum import DecodeError
from runtime.log.schemas.serde import Serde
from runtime.schedules.spec import CATCH_UPS, CatchUp, Schedule, ScheduleError

log = logging.getLogger("agentlog.schedules")

DEFINED = "schedule/"
FIRED = "fired/"


class ScheduleStore:
    """Reads and writes one deployment's schedules topic."""

    def __init__(
        self,
        settings: Settings,
        log: EventLog,
        serde: Serde,
        *,
        identity: str = "client",
        partition_count: Callable[[str], int | None] | None = None,
    ) -> None:
        """``partition_count``: how many partitions a topic has, None if it does not exist (the
        Kafka log's), so a missing topic is said at once."""
        self.topic = settings.schedules_topic
        self.log, self.serde, self.identity = log, serde, identity
        self._partition_count = partition_count
        self._next = 0
        self._schedules: dict[str, Schedule] = {}
        self._fired: dict[str, ScheduleFired] = {}

    def check_topic(self) -> None:
        """ScheduleError if the schedules topic does not exist (a deployment made before schedules)."""
        if self._partition_count is not None and self._partition_count(self.topic) is None:
            raise ScheduleError(
                f"the schedules topic {self.topic!r} does not exist: `agentlog infra up` creates the "
                "deployment's topics, this one among them"
            )
        try:
            self.log.watermarks(self.topic, 0)
        except AgentlogError as error:
            raise ScheduleError(
                f"cannot read the schedules topic {self.topic!r} ({error}): `agentlog infra up` creates the "
                "deployment's topics, this one among them"
            ) from error

    def refresh(self) -> None:
        """Read what was appended since the last refresh."""
        for record in self.log.read(self.topic, 0, start=self._next):
            self._next = record.offset + 1
            key = (record.key or b"").decode("utf-8", "replace")
            if key.startswith(DEFINED):
                self._defined(key[len(DEFINED) :], record.key, record.value, record.offset)
            elif key.startswith(FIRED):
                self._fired_at(key[len(FIRED) :], record.key, record.value, record.offset)

    def _decode(self, key: bytes | None, value: bytes, offset: int) -> object | None:
        try:
            return self.serde.decode(value, key, self.topic)
        except DecodeError as error:  # a newer version's record, or damage: skipped, and said so
            log.warning(
                "schedules topic %s@%s: cannot decode the record (%s); skipped", self.topic, offset, error
            )
            return None

    def _defined(self, name: str, key: bytes | None, value: bytes | None, offset: int) -> None:
        if value is None:
            self._schedules.pop(name, None)
            return
        record = self._decode(key, value, offset)
        if not isinstance(record, ScheduleDefined) or record.catch_up not in CATCH_UPS:
            return
        self._schedules[name] = Schedule(
            name=record.name,
            workflow=record.workflow,
            input=record.input,
            cron=record.cron,
            every_ms=record.every_ms,
            timezone=record.timezone,
            catch_up=cast(CatchUp, record.catch_up),  # checked against CATCH_UPS above
            paused=record.paused,
            active_from=record.active_from,
        )

    def _fired_at(self, name: str, key: bytes | None, value: bytes | None, offset: int) -> None:
        if value is None:
            self._fired.pop(name, None)
            return
        record = self._decode(key, value, offset)
        if not isinstance(record, ScheduleFired):
            return
        # Two schedulers may write out of order: the latest fire time wins (a re-fire of an earlier
        # one would only resubmit a run id that already exists).
        known = self._fired.get(name)
        if known is None or record.fire_time >= known.fire_time:
            self._fired[name] = record

    def schedules(self) -> dict[str, Schedule]:
        """The schedules as of the last refresh, by name."""
        return dict(self._schedules)

    def get(self, name: str) -> Schedule | None:
        return self._schedules.get(name)

    def last_fired(self, name: str) -> ScheduleFired | None:
        return self._fired.get(name)

    def put(self, schedule: Schedule, *, now_ms: int) -> None:
        """Write ``schedule`` (new, paused or resumed) and wait for the ack."""
        record = ScheduleDefined(
            run_id=DEFINED + schedule.name,
            occurred_at=now_ms,
            worker=self.identity,
            name=schedule.name,
            workflow=schedule.workflow,
            input=schedule.input,
            cron=schedule.cron,
            every_ms=schedule.every_ms,
            timezone=schedule.timezone,
            catch_up=schedule.catch_up,
            paused=schedule.paused,
            active_from=schedule.active_from,
        )
        self._append(record.run_id, self.serde.encode(record))
        self.log.flush()

    def delete(self, name: str) -> None:
        """Tombstones for the schedule and its fire time; waits for the acks."""
        self._append(DEFINED + name, None)
        self._append(FIRED + name, None)
        self.log.flush()

    def record_fired(
        self, name: str, fire_ms: int, run_id: str, *, now_ms: int, refused: str | None = None
    ) -> None:
        """Write that ``fire_ms`` was handled (its run submitted, or ``refused``); waits for the ack."""
        record = ScheduleFired(
            run_id=FIRED + name,
            occurred_at=now_ms,
            worker=self.identity,
            name=name,
            fire_time=fire_ms,
            fired_run=run_id,
            refused=refused,
        )
        self._append(record.run_id, self.serde.encode(record))
        self.log.flush()
        known = self._fired.get(name)
        if known is None or fire_ms >= known.fire_time:  # seen before the next refresh reads it back
            self._fired[name] = record

    def _append(self, key: str, value: bytes | None) -> None:
        self.log.append(self.topic, 0, key.encode(), value)
