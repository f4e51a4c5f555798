"""Typed records of the log: one immutable dataclass per schema in ``schemas/``.

The classes mirror the ``.avsc`` files field for field (a unit test keeps them in step);
conversion to and from Avro happens only in :mod:`runtime.log.schemas.serde`. The envelope fields
(``seq``, ``occurred_at``, ``worker``, ``epoch``) are filled in by the writer when a
record is appended, so code that builds a record names only what it means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

from runtime.log.records.status import ENDING_EVENTS

R = TypeVar("R")


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(field,))
def record_type(cls: type[R]) -> type[R]:
    """A record class: a keyword-only dataclass with slots, immutable to the type checker.

    Not frozen at run time: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__`` (3.0 us for a ModelCallCompleted, against 0.58 us), which every
    record decoded by a rebuild or a client's tail pays; and its class takes twice as long to
    create (these 31: 44 ms of every worker's start, against 25 ms). mypy still refuses an
    assignment to a field (``frozen_default``), and records hash as frozen ones do."""
    return dataclass(kw_only=True, slots=True, unsafe_hash=True)(cls)


@record_type
class Record:
    """The envelope every command and event carries."""

    run_id: str
    seq: int = 0
    # Not in the Avro value: filled on decode with the registry version (per subject) of the
    # schema that wrote the record, from the id in its frame (runtime.log.schemas.serde); 0 on a record
    # not read from the log.
    schema_version: int = 0
    occurred_at: int = 0  # milliseconds since the epoch (Avro timestamp-millis)
    worker: str = ""
    epoch: int = -1

    @property
    def type(self) -> str:
        return type(self).__name__


@record_type
class Command(Record):
    """A record of ``agentlog.commands``: an input from outside the run."""


@record_type
class Event(Record):
    """A record of ``agentlog.events``: the journal of a run."""

    # The record's link in its run's hash chain, as read (runtime.log.records.chain); the writer
    # seals it into the encoded bytes, so a record built in code leaves it empty.
    chain: bytes = b""


@record_type
class CancelRequested(Command):
    """A request to cancel a run."""

    reason: str = ""


@record_type
class ChildEnded(Command):
    """A child run ended: sent by its worker to the parent's partition, keyed by the parent's id."""

    child_run_id: str
    child_status: str  # completed, failed, cancelled or rejected
    result: str | None = None
    error_type: str | None = None
    error: str | None = None
    spend: str | None = None  # a budgeted child's calls (runtime.workflow.budget.spend_json)


@record_type
class ChildRunEnded(Event):
    """A child run this run started has ended; resolves the call that waits for it."""

    position: int
    child_run_id: str
    child_status: str  # completed, failed, cancelled or rejected
    result: str | None = None
    error_type: str | None = None
    error: str | None = None
    spend: str | None = None  # a budgeted child's calls, added to this run's spend
    command_offset: int


@record_type
class ChildRunScheduled(Event):
    """The run started a child run; durable before the child's submission is sent."""

    position: int
    child_run_id: str
    workflow: str
    args_hash: str
    input: str
    parent_close: str = "cancel"


@record_type
class ChildRunSignalled(Event):
    """The run sent a signal (or a cancel) to a child run it started."""

    position: int
    child_run_id: str
    name: str
    payload: str
    cancel: bool = False


@record_type
class EpochClaimed(Event):
    """A worker took ownership of this partition; its epoch is this record's offset. Records of older epochs that follow are a fenced writer's and are ignored."""

    partition: int
    previous_epoch: int = -1
    signature: bytes = b""  # the workers' signature (runtime.log.records.partition_signing), as read


@record_type
class ModelCallCompleted(Event):
    """A model call returned."""

    position: int
    result: str
    attempt: int = 1
    latency_us: int = 0
    in_doubt: bool = False
    result_offset: int | None = None
    result_sha256: str | None = None
    result_size: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    response_model: str | None = None


@record_type
class ModelCallFailed(Event):
    """A model call attempt failed."""

    position: int
    error_type: str
    error: str
    attempt: int = 1
    latency_us: int = 0
    final: bool = True
    in_doubt: bool = False
    retry_at: int = 0  # ms since the epoch the next attempt may start at; 0: by the policy's backoff


@record_type
class ModelCallScheduled(Event):
    """A model call is about to run; durable before it starts."""

    position: int
    model: str
    args_hash: str
    prompt_version: str | None = None
    args: str | None = None
    # The prompt itself, each distinct message once per run (runtime.log.records.prompts).
    message_count: int = -1
    message_slots: list[int] = field(default_factory=list)
    new_roles: list[str] = field(default_factory=list)
    new_messages: list[str] = field(default_factory=list)
    params: str | None = None


@record_type
class NonDeterminismDetected(Event):
    """Replay found code and history disagree."""

    position: int
    expected: str
    issued: str
    message: str


@record_type
class PartitionCheckpoint(Event):
    """Where a rebuild of this partition may start: the first offsets of its non-terminal runs."""

    partition: int
    covered_offset: int
    commands_offset: int
    active_runs: dict[str, int] = field(default_factory=dict)
    # Those of active_runs waiting only on signals or timers at covered_offset -> their record count,
    # and "<run id>@<position>" -> fire_at of the timers they wait for (runtime.worker.run_cache).
    waiting_runs: dict[str, int] = field(default_factory=dict)
    waiting_timers: dict[str, int] = field(default_factory=dict)
    # Commands at or after commands_offset already handled (runtime.worker.admission): skipped.
    commands_handled: list[int] = field(default_factory=list)
    signature: bytes = b""  # the workers' signature (runtime.log.records.partition_signing), as read


@record_type
class PatchRecorded(Event):
    """The workflow took the new branch of ctx.patched(change_id)."""

    position: int
    patch_id: str


@record_type
class PermitAwaited(Event):
    """A call could not start at once: it waits for a permit of a deployment-wide limit. Neither a failure nor a call in flight: a run recovered while waiting waits again."""

    position: int
    limit: str
    dimension: str
    attempt: int = 1
    key: str | None = None
    needed: int = 0


@record_type
class PermitGranted(Event):
    """The call that waited for a permit (PermitAwaited at the same position and attempt) holds every permit it needs and starts."""

    position: int
    limit: str
    dimension: str
    attempt: int = 1
    key: str | None = None
    waited_ms: int = 0


@record_type
class PromptDrifted(Event):
    """On replay a model call matched its record by name but not by prompt: the recorded decision was served and the drift recorded (once per position and issued prompt)."""

    position: int
    model: str
    recorded_args_hash: str
    issued_args_hash: str
    recorded_prompt_version: str | None = None
    issued_prompt_version: str | None = None


@record_type
class Redecided(Event):
    """A re-decide point found a recorded decision stale and replaced it."""

    position: int
    original: str
    check: str
    replacement: str
    reason: str = ""


@record_type
class RunCancelled(Event):
    """The run was cancelled."""

    reason: str = ""
    command_offset: int
    signature: bytes = b""  # the workers' signature (runtime.log.records.signing), as read


@record_type
class RunCompleted(Event):
    """The workflow returned."""

    result: str
    signature: bytes = b""  # the workers' signature (runtime.log.records.signing), as read


@record_type
class RunContinuedAsNew(Event):
    """The run ended and carried its state into a fresh run."""

    new_run_id: str
    input: str
    signature: bytes = b""  # the workers' signature (runtime.log.records.signing), as read


@record_type
class RunFailed(Event):
    """The workflow raised."""

    error_type: str
    error: str
    signature: bytes = b""  # the workers' signature (runtime.log.records.signing), as read


@record_type
class RunParked(Event):
    """The run is stopped, not failed, awaiting an operator (non-determinism, history limit)."""

    reason: str
    position: int = 0
    signature: bytes = b""  # the workers' signature (runtime.log.records.signing), as read


@record_type
class RunRejected(Event):
    """A submission that cannot run: unknown workflow, malformed JSON, wrong payload shape."""

    reason: str
    workflow: str | None = None
    raw: str = ""
    command_offset: int
    signature: bytes = b""  # the workers' signature (runtime.log.records.signing), as read


@record_type
class RunStarted(Event):
    """The worker accepted a submission and started the run."""

    workflow: str
    input: str
    command_offset: int
    parent_run_id: str | None = None
    reset_position: int = 0
    key_root: str | None = None
    trace_id: str | None = None
    fork_overrides: str | None = None
    budget: str | None = None  # JSON (runtime.workflow.budget): the budget that binds the run
    deadline: int | None = None  # ms since the epoch (runtime.workflow.deadlines): the run is cancelled at it
    child_of: str | None = None  # a child run's parent (runtime.workflow.children)
    whatif: str | None = None  # the what-if this fork belongs to (runtime.whatif)
    whatif_change: str | None = None  # JSON (runtime.workflow.whatif_change): what the what-if changes
    signature: bytes = b""  # the workers' signature (runtime.log.records.signing), as read


@record_type
class RunSubmitted(Command):
    """A request to start a run of a workflow."""

    workflow: str
    input: str
    reset_from: str | None = None
    reset_position: int = 0
    key_root: str | None = None
    seed: str | None = None
    continued_from: str | None = None
    fork_overrides: str | None = None
    budget: str | None = None  # JSON (runtime.workflow.budget): the submission's budget override
    deadline: int | None = None  # ms since the epoch (runtime.workflow.deadlines): the submission's
    child_of: str | None = None  # a child run's parent (runtime.workflow.children)
    whatif: str | None = None  # the what-if this fork belongs to (runtime.whatif)
    whatif_change: str | None = None  # JSON (runtime.workflow.whatif_change): what the what-if changes


@record_type
class SignalReceived(Event):
    """A signal reached the run."""

    name: str
    payload: str
    command_offset: int


@record_type
class SignalSent(Command):
    """A signal for a running workflow."""

    name: str
    payload: str


@record_type
class TimerFired(Event):
    """A durable timer fired."""

    position: int


@record_type
class TimerScheduled(Event):
    """A durable timer (sleep, or a signal wait's timeout)."""

    position: int
    name: str = "sleep"
    fire_at: int
    duration_ms: int


@record_type
class ToolCallCompleted(Event):
    """A tool call returned."""

    position: int
    result: str
    attempt: int = 1
    latency_us: int = 0
    in_doubt: bool = False
    result_offset: int | None = None
    result_sha256: str | None = None
    result_size: int = 0


@record_type
class ToolCallFailed(Event):
    """A tool call attempt failed."""

    position: int
    error_type: str
    error: str
    attempt: int = 1
    latency_us: int = 0
    final: bool = True
    in_doubt: bool = False
    retry_at: int = 0  # ms since the epoch the next attempt may start at; 0: by the policy's backoff


@record_type
class ToolCallHeartbeat(Event):
    """A tool call in flight reported its progress (heartbeat(details)). It decides nothing: a retry of the call, on this worker or the next, reads the last details back (last_heartbeat()) to resume from them; status shows them."""

    position: int
    attempt: int = 1
    details: str = "null"  # canonical JSON
    beat_at: int = 0  # ms since the epoch the tool reported them; 0: unknown


@record_type
class ToolCallScheduled(Event):
    """A tool call is about to run; durable before it starts (and before any effect)."""

    position: int
    tool: str
    args_hash: str
    args: str
    effect: bool = False
    idempotency_key: str | None = None
    # A compensation (ctx.tool(..., compensate_with=...)): the position of the effect it undoes.
    compensates: int | None = None


COMMAND_TYPES: tuple[type[Command], ...] = (RunSubmitted, SignalSent, CancelRequested, ChildEnded)
EVENT_TYPES: tuple[type[Event], ...] = (
    ChildRunEnded,
    ChildRunScheduled,
    ChildRunSignalled,
    EpochClaimed,
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallScheduled,
    NonDeterminismDetected,
    PartitionCheckpoint,
    PatchRecorded,
    PermitAwaited,
    PermitGranted,
    PromptDrifted,
    Redecided,
    RunCancelled,
    RunCompleted,
    RunContinuedAsNew,
    RunFailed,
    RunParked,
    RunRejected,
    RunStarted,
    SignalReceived,
    TimerFired,
    TimerScheduled,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallHeartbeat,
    ToolCallScheduled,
)


@record_type
class CheckpointRecord(Record):
    """A record of the checkpoints topic that is not a ``PartitionCheckpoint`` (which predates this
    role and stays an event schema)."""


@record_type
class CheckpointSnapshots(CheckpointRecord):
    """The run snapshots the partition checkpoint with the same covered_offset vouches for: each holds every record of its run below that offset (compacted checkpoints topic, key snapshots/<partition>)."""

    partition: int
    covered_offset: int
    snapshot_through: dict[str, int] = field(default_factory=dict)
    signature: bytes = b""  # the workers' signature (runtime.log.records.partition_signing), as read


@record_type
class HistorySnapshot(CheckpointRecord):
    """The recorded history of one long-waiting run, so a rebuild need not re-read the partition from the run's start (compacted checkpoints topic, key snapshot/<run id>)."""

    partition: int
    first_offset: int
    through_offset: int
    records: list[bytes]
    sha256: str
    signature: bytes = b""  # the workers' signature (runtime.log.records.partition_signing), as read


CHECKPOINT_TYPES: tuple[type[CheckpointRecord], ...] = (CheckpointSnapshots, HistorySnapshot)


@record_type
class ScheduleRecord(Record):
    """A record of the compacted schedules topic (runtime.schedules); ``run_id`` holds its key."""


@record_type
class ScheduleDefined(ScheduleRecord):
    """A schedule as last written by `agentlog schedule add|pause|resume` (key schedule/<name>)."""

    name: str
    workflow: str
    input: str
    cron: str = ""
    every_ms: int = 0
    timezone: str = "UTC"
    catch_up: str = "latest"
    paused: bool = False
    active_from: int = 0


@record_type
class ScheduleFired(ScheduleRecord):
    """The latest fire time of a schedule a scheduler handled, written after its submission (key fired/<name>)."""

    name: str
    fire_time: int
    fired_run: str = ""
    refused: str | None = None


SCHEDULE_TYPES: tuple[type[ScheduleRecord], ...] = (ScheduleDefined, ScheduleFired)
RECORD_TYPES: dict[str, type[Record]] = {
    cls.__name__: cls for cls in (*COMMAND_TYPES, *EVENT_TYPES, *CHECKPOINT_TYPES, *SCHEDULE_TYPES)
}

# Records that end a run (runtime.log.records.status); after one of them the run accepts nothing but reads.
TERMINAL_TYPES: tuple[type[Event], ...] = tuple(cls for cls in EVENT_TYPES if cls.__name__ in ENDING_EVENTS)
# Records about the partition, not about one run.
PARTITION_TYPES: tuple[type[Event], ...] = (EpochClaimed, PartitionCheckpoint)
