"""The migrations as they were released: each one's SQL whole, in a file of its own beside this module.

``V0001__events_table.sql`` holds migration 1's statements, each followed by a line holding only
``;``. A released file is never edited: a store that applied it holds its checksum, and
tests/unit/test_migrations_released.py pins every migration's sha256. A change to the store's
shape is a new file and a new entry at the end of :data:`RELEASED`.
"""

from __future__ import annotations

from importlib.resources import files

from .migration import STATEMENT_SEPARATOR, Migration


def load(version: int, name: str, file: str) -> Migration:
    """Migration ``version`` from ``file``, a sibling of this module (in a checkout or a wheel)."""
    text = files("analytics.migrations").joinpath(file).read_text(encoding="utf-8")
    *statements, after_last = text.split(STATEMENT_SEPARATOR)
    if not statements or after_last or not all(statements):
        raise ValueError(f"{file}: expected statements each followed by a line holding only ';'")
    return Migration(version, name, tuple(statements))


RELEASED: tuple[Migration, ...] = (
    # One row per record of the events topic: where it sits in Kafka (also the sink's resume
    # position), what the sink derived, the envelope, and a column per field of the event schemas
    # released with version 1. Ordered by run id, so per-run questions read a few granules.
    load(1, "events table", "V0001__events_table.sql"),
    load(2, "writer schemas table", "V0002__writer_schemas_table.sql"),
    # Views rather than materialized views: a view always agrees with the raw rows, including the
    # fencing verdict, whereas a materialized view fed by the same insert is a second, separately
    # committed part that a kill between the two could lose or double. Whole-store aggregates
    # scan, which at audit frequency is cheap. history_size takes its thresholds as parameters,
    # so they come from Settings at query time, not from the DDL.
    load(3, "audit views", "V0003__audit_views.sql"),
    # Insert parts stay compact (all columns in one file) until merges grow them past 256 MiB: a
    # sink batch written wide is ~200 files (data, marks, null maps), and creating them costs more
    # than encoding the data (bench/sink.py). Large merged parts still become wide, as scans want.
    load(4, "compact insert parts", "V0004__compact_insert_parts.sql"),
    # RunStarted's fields for `agentlog reset`: shipped, so the store's shape does not depend on
    # which records the sink has met (a derived migration would add them on the first one).
    load(5, "reset columns", "V0005__reset_columns.sql"),
    # The fields of a result stored out of line (ModelCallCompleted, ToolCallCompleted).
    load(6, "out-of-line result columns", "V0006__out_of_line_result_columns.sql"),
    # The runs view in the status vocabulary of runtime.log.records.status as it stood: a run with
    # no status event is "unknown", and a parked run has ended (ended_at is when it was parked).
    # tests/unit/test_status.py checks that the latest runs view and that vocabulary agree.
    load(7, "runs view: the runtime's status vocabulary", "V0007__runs_view_status_vocabulary.sql"),
    # PromptDrifted (a model call served from history under a changed prompt) and the view the
    # audit reads: "position 1 decided under prompt v1; code now issues v2".
    load(8, "prompt drift columns and view", "V0008__prompt_drift.sql"),
    # The sink fills schema_version from the frame (consumers.store_writer), as the runtime's
    # decoder does; rows stored before carry the envelope's constant 1.
    load(9, "schema_version: the registry version of the writer schema", "V0009__schema_version_comment.sql"),
    # The audit record answers "why": the prompt (each ModelCallScheduled appends its new messages
    # to the run's sequence and names its prompt as ranges of it, rebuilt here in SQL), usage of
    # the completed attempts, prices as data (cost is computed when the view is read, so a
    # corrected price re-prices history), and the calls a reset or fork copied.
    load(10, "audit: prompts, usage, prices and cost", "V0010__audit_prompts_usage_prices_cost.sql"),
    # The payloads topic as the sink copies it; model_calls replaces a blob pointer by the message
    # it names when a payload with that sha256 is stored (content-addressed: a reset or fork finds
    # its original's), and otherwise keeps the pointer, which `audit call` reports unverified.
    load(11, "payloads table; model_calls resolves messages stored out of line", "V0011__payloads.sql"),
    # ToolCallScheduled.compensates: a compensating call names the position of the effect it undoes.
    load(12, "compensations: the effect a compensating call undoes", "V0012__compensation_columns.sql"),
    # A call is priced by the first of three names with a price -- the model the provider
    # reported, the call's own model parameter, the registered name -- and priced_by says which.
    load(
        13,
        "model_calls priced by the reported model, the call's model parameter or the registered name",
        "V0013__model_calls_priced_by_three_names.sql",
    ),
    # Every event's link in its run's hash chain: `agentlog audit verify --from-store` re-encodes
    # each row and checks it against its link.
    load(14, "chain: each event's link in its run's hash chain", "V0014__chain_column.sql"),
    # The budget that bound each run (RunStarted.budget), on the runs view: `audit cost --by run`
    # shows it beside the run's spend.
    load(15, "runs: the budget that bound each run", "V0015__run_budget.sql"),
    # PermitAwaited / PermitGranted (a call waiting for a permit of a declared limit): their
    # fields, and the view that answers "why did step 17 take 40 s" (docs/limits.md).
    load(16, "permit waits: the limit a call waited for, and how long", "V0016__permit_waits.sql"),
    # ModelCallFailed/ToolCallFailed.retry_at: when a rate-limited call's next attempt may start
    # (the wait the provider asked for), so `audit` can say why a step took minutes.
    load(17, "retry_at: when a rate-limited call's next attempt may start", "V0017__retry_at_column.sql"),
    # PartitionCheckpoint.waiting_runs: the runs waiting at a checkpoint, which a takeover indexes
    # without replaying them (runtime.worker.run_cache).
    load(18, "waiting_runs: the runs a checkpoint lists as waiting", "V0018__checkpoint_waiting_runs.sql"),
    # Child runs (ctx.child): the fields of ChildRunScheduled / ChildRunEnded / ChildRunSignalled and
    # RunStarted.child_of; the runs view names each run's parent, so `audit runs --parent` lists a tree.
    load(
        19,
        "child runs: their records' fields, and each run's parent on the runs view",
        "V0019__child_runs.sql",
    ),
    # ToolCallHeartbeat (a tool call's progress, heartbeat(details)): its details and when the tool
    # reported them, so `audit` can show how far a long call got.
    load(20, "heartbeats: a tool call's reported progress and when", "V0020__heartbeat_columns.sql"),
    # RunStarted.deadline / RunSubmitted.deadline: when the run is cancelled if it has not ended
    # (runtime.workflow.deadlines), ms since the epoch.
    load(21, "deadline: when a run is cancelled if it has not ended", "V0021__run_deadline.sql"),
    # PartitionCheckpoint.commands_handled: the commands handled past one held for admission, which
    # a takeover skips (runtime.worker.admission).
    load(
        22,
        "commands_handled: the commands a checkpoint lists as handled past its commit",
        "V0022__checkpoint_commands_handled.sql",
    ),
    # The workers' signature on each record that sets a run's status (runtime.log.records.signing),
    # so the store holds what `audit verify` and a reader with the verify key check.
    load(
        23,
        "signature: the workers' signature on a run's status-bearing records",
        "V0023__signature_column.sql",
    ),
    # What-if runs (agentlog whatif): RunStarted.whatif / whatif_change, the runs view's whatif (audit
    # runs leaves what-if runs out unless asked), and each what-if run beside its original.
    load(24, "what-if runs: their marker, and each beside its original", "V0024__whatif_runs.sql"),
)
