"""What a partition holds of its commands for admission control (runtime.worker.admission).

Two pieces of state, one per owned partition:

- :class:`HeldCommands`: the commands waiting for room in the run cache (submissions, and wakes of
  runs not in memory), in offset order; the runs they name; and the offsets handled *past* the
  first held one (a signal to a run in memory, a cancel), which a checkpoint lists so that a
  rebuild resuming at the first held command skips them rather than applying them twice.
- :class:`CommandWindow`: after a takeover, the commands between where the checkpoint resumes and
  the highest command the log names as handled: those offsets are skipped, the others (held when
  the last owner stopped, or ignored) handled again.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from runtime.log.port.protocol import Delivery


@dataclass
class HeldCommands:
    """One partition's commands held for admission, and the offsets handled past them."""

    queue: deque[Delivery] = field(default_factory=deque)
    runs: Counter[str] = field(default_factory=Counter)  # run id -> its commands in ``queue``
    # Offsets handled while a lower one was held (or skipped as handled before a takeover): above
    # the commit point, so a checkpoint lists them (``PartitionCheckpoint.commands_handled``).
    handled_past: set[int] = field(default_factory=set)
    paused: bool = False  # the partition's fetching is paused (its queue passed the bound)

    def hold(self, delivery: Delivery, run_id: str) -> None:
        self.queue.append(delivery)
        self.runs[run_id] += 1

    def release(self) -> Delivery:
        """The first held command, out of the queue."""
        delivery = self.queue.popleft()
        run_id = (delivery.key or b"").decode("utf-8", "replace")
        left = self.runs[run_id] - 1
        if left > 0:
            self.runs[run_id] = left
        else:
            del self.runs[run_id]
        return delivery

    def first(self) -> int | None:
        """The offset of the first held command; None if none is held."""
        return self.queue[0].offset if self.queue else None

    def note_handled(self, offset: int, lowest_unhandled: int) -> None:
        """``offset`` was handled while ``lowest_unhandled`` (an offset below it) was not."""
        if lowest_unhandled < offset:
            self.handled_past.add(offset)

    def handled_above(self, commit: int) -> list[int]:
        """The offsets handled at or above ``commit`` (what a checkpoint committing it lists);
        those below it are forgotten: the commit covers them."""
        self.handled_past = {offset for offset in self.handled_past if offset >= commit}
        return sorted(self.handled_past)


@dataclass
class CommandWindow:
    """The commands a takeover reads again: from the checkpoint's commit point up to ``high``."""

    high: int  # every command at or above it is new: handled as any
    handled: set[int]  # offsets below ``high`` handled before the takeover: skipped
    started: dict[str, int]  # run id -> the offset of the submission that started it, in the window

    @classmethod
    def of(
        cls, commit: int, high: int, handled: Iterable[int], started: Mapping[str, int]
    ) -> CommandWindow | None:
        """The window from ``commit`` to ``high``; None when it is empty."""
        if high <= commit:
            return None
        return cls(high, {o for o in handled if commit <= o < high}, dict(started))

    def skips(self, offset: int) -> bool:
        """Whether the command at ``offset`` was handled before the takeover."""
        return offset < self.high and offset in self.handled

    def started_after(self, run_id: str, offset: int) -> bool:
        """Whether ``run_id`` was started by a submission after ``offset``: a signal or cancel at
        ``offset`` handled again found it not started, and was ignored, the first time."""
        started = self.started.get(run_id)
        return started is not None and started > offset and offset < self.high
