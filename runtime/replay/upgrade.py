"""The upgrade gate (``agentlog upgrade check``): may new code be deployed while runs are in flight?

Three questions, answered without calling out and without writing: (a) are the local schemas
compatible with the registry (its FULL_TRANSITIVE policy)? (b) which runs are in flight (a
``RunStarted`` and no ending event, read from every partition of the events topic, fenced records
dropped; or, with ``--from-store``, the runs the analytics store lists as running -- asked through
the ``agentlog.in_flight_runs`` entry-point group, since runtime does not import analytics -- and
only their records read from their partitions)? (c) what does the new code do with each of their histories (a shadow replay with the
public :class:`~runtime.replay.replayer.Replayer`, out-of-line results read back)? A run would
park if the new code issues another command than its history holds; a changed model prompt is
drift, recorded and served (seed 003), not a reason to refuse the deploy. Nothing is printed
here: :mod:`runtime.cli.upgrade` prints.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.port.partitioning import partition_for
from runtime.log.port.protocol import EventLog
from runtime.log.records.events import PARTITION_TYPES, Event, PatchRecorded, RunStarted
from runtime.log.records.fencing import FenceFilter
from runtime.log.records.partition_signing import claim_check
from runtime.log.records.payloads import PayloadMissing, inlined, read_back
from runtime.log.records.signing import verify_key_of
from runtime.log.records.status import RunState, status_after
from runtime.log.schemas.catalog import DEFAULT_SCHEMA_DIR
from runtime.log.schemas.datum import DecodeError
from runtime.log.schemas.serde import Serde
from runtime.replay.replayer import Replayer
from runtime.workflow.app import App
from runtime.workflow.intents import Drift

Verdict = Literal["ok", "drift", "park"]

IN_FLIGHT_GROUP = "agentlog.in_flight_runs"
InFlightProvider = Callable[[Settings], list[str]]
"""An ``agentlog.in_flight_runs`` entry: the ids of the runs a store lists as running."""


@dataclass(frozen=True)
class RunVerdict:
    """What the new code would do with one in-flight run."""

    run_id: str
    workflow: str
    verdict: Verdict
    detail: (
        str  # "ok", "drift at 1: v1 -> v2", "would park at position 2: history holds ..., code issues ..."
    )
    drift: tuple[Drift, ...] = ()
    old_patches: tuple[str, ...] = ()  # markers whose old branch the run keeps
    recorded_patches: tuple[str, ...] = ()  # markers the run took (PatchRecorded)


@dataclass(frozen=True)
class SchemaVerdict:
    subject: str
    status: str  # as SchemaAdmin.check(): new | unchanged | compatible | incompatible ...
    detail: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status not in ("incompatible", "refused")


@dataclass(frozen=True)
class UpgradeReport:
    schemas: tuple[SchemaVerdict, ...]
    runs: tuple[RunVerdict, ...]
    skipped: tuple[str, ...] = field(default=())  # run ids whose records could not be read

    @property
    def ok(self) -> bool:
        """False if a schema is incompatible, an in-flight run would park or could not be read."""
        return (
            all(s.ok for s in self.schemas)
            and not any(r.verdict == "park" for r in self.runs)
            and not self.skipped
        )

    def patches_still_needed(self) -> dict[str, tuple[str, ...]]:
        """Patch id -> in-flight runs that still need its old branch (the marker cannot go yet)."""
        needed: dict[str, list[str]] = {}
        for run in self.runs:
            for patch_id in run.old_patches:
                needed.setdefault(patch_id, []).append(run.run_id)
        return {patch_id: tuple(runs) for patch_id, runs in sorted(needed.items())}

    def patches_recorded(self) -> dict[str, tuple[str, ...]]:
        """Patch id -> in-flight runs that took its new branch (the ``ctx.patched`` call must stay)."""
        recorded: dict[str, list[str]] = {}
        for run in self.runs:
            for patch_id in run.recorded_patches:
                recorded.setdefault(patch_id, []).append(run.run_id)
        return {patch_id: tuple(runs) for patch_id, runs in sorted(recorded.items())}


def check_schemas(settings: Settings, schema_dir: Path = DEFAULT_SCHEMA_DIR) -> tuple[SchemaVerdict, ...]:
    """(a) The local schemas against the registry (``SchemaAdmin.check``)."""
    from runtime.log.schemas.registry_admin import SchemaAdmin  # the registry client is slow to import

    return tuple(
        SchemaVerdict(r.subject, r.status, tuple(r.detail)) for r in SchemaAdmin(settings, schema_dir).check()
    )


def in_flight_provider() -> InFlightProvider:
    """The installed ``agentlog.in_flight_runs`` provider (analytics registers one); an
    :class:`AgentlogError` if none is installed or it cannot be imported."""
    from importlib.metadata import entry_points

    found = sorted(entry_points(group=IN_FLIGHT_GROUP), key=lambda e: e.name)
    if not found:
        raise AgentlogError(
            f"--from-store: no provider in the {IN_FLIGHT_GROUP!r} entry-point group "
            "(install agentlog with its analytics package: pip install -e .)"
        )
    try:
        provider: InFlightProvider = found[0].load()
    except Exception as exc:
        raise AgentlogError(f"--from-store: cannot load {found[0].value}: {exc}") from exc
    return provider


def store_in_flight(settings: Settings, provider: InFlightProvider | None = None) -> list[str]:
    """The run ids the store lists as running (deduplicated, in the provider's order); any failure
    of the provider becomes a one-line :class:`AgentlogError`."""
    provider = provider or in_flight_provider()
    try:
        run_ids = provider(settings)
    except AgentlogError as exc:
        raise AgentlogError(f"--from-store: {' '.join(str(exc).split())}") from exc
    except Exception as exc:
        raise AgentlogError(
            f"--from-store: the store cannot be read: {type(exc).__name__}: {' '.join(str(exc).split())}"
        ) from exc
    return list(dict.fromkeys(run_ids))


def in_flight_histories(
    log: EventLog, serde: Serde, settings: Settings, run_ids: Collection[str] | None = None
) -> tuple[list[list[Event]], list[str]]:
    """(b) The histories of every run in flight (every partition, fenced records dropped,
    out-of-line results read back), in log order; and the ids of runs that could not be read.

    With ``run_ids`` (a store's list), only those runs' partitions are read, and only their records
    and the keyless ones (the fence needs the ``EpochClaimed`` records); a listed run the log shows
    ended (the store lags the log) or never started is not in flight."""
    keys: frozenset[bytes] | None = None
    partitions: Sequence[int] = range(settings.partitions)
    if run_ids is not None:
        keys = frozenset(r.encode("utf-8") for r in run_ids)
        partitions = sorted({partition_for(r, settings.partitions) for r in run_ids})
    histories: list[list[Event]] = []
    skipped: list[str] = []
    for partition in partitions:
        fence = FenceFilter(claims=claim_check(verify_key_of(settings.verify_key), partition))
        runs: dict[str, list[Event]] = {}
        states: dict[str, RunState] = {}
        undecodable: set[str] = set()
        keep = None if keys is None else (lambda k, keys=keys: k is None or k in keys)
        for record in log.read(settings.events_topic, partition, keep=keep):
            if record.value is None:
                continue
            try:
                event = serde.decode(record.value, record.key)
            except DecodeError:
                if record.key is not None:
                    undecodable.add(record.key.decode(errors="replace"))
                continue
            assert isinstance(event, Event)
            if not fence.admit(event, record.offset) or isinstance(event, PARTITION_TYPES):
                continue
            if isinstance(event, RunStarted) and (run_ids is None or event.run_id in run_ids):
                runs[event.run_id] = []
            if event.run_id in runs:
                runs[event.run_id].append(event)
            states[event.run_id] = status_after(event.type, states.get(event.run_id, "unknown"))
        for run_id, events in runs.items():
            if states.get(run_id) != "running":
                continue
            if run_id in undecodable:
                skipped.append(run_id)
                continue
            try:
                # getattr: callers may hand any decoder with Serde's decode (the tests' pickling one)
                sealer = getattr(serde, "sealer", None)
                stored = read_back(log, settings.payloads_topic, partition, events, sealer)
                histories.append(inlined(events, stored))
            except PayloadMissing:
                skipped.append(run_id)
    return histories, skipped


def shadow_replay(app: App, histories: Sequence[Sequence[Event]]) -> tuple[RunVerdict, ...]:
    """(c) Each history replayed against ``app`` (nothing called, nothing written)."""
    replayer = Replayer(app=app, raise_on_replay_failure=False)
    verdicts = []
    for history in histories:
        started = history[0]
        assert isinstance(started, RunStarted)
        recorded = tuple(dict.fromkeys(e.patch_id for e in history if isinstance(e, PatchRecorded)))
        try:
            result = replayer.replay(history)
        except AgentlogError as error:  # e.g. the workflow is no longer registered
            verdicts.append(
                RunVerdict(
                    started.run_id,
                    started.workflow,
                    "park",
                    f"would park: {error}",
                    recorded_patches=recorded,
                )
            )
            continue
        if result.divergence is not None:
            d = result.divergence
            verdict: Verdict = "park"
            detail = (
                f"would park at position {d.position}: history holds {d.expected}, code issues {d.issued}"
            )
        elif result.drift:
            verdict = "drift"
            detail = "; ".join(
                f"drift at {x.position}: {x.recorded_prompt_version} -> {x.issued_prompt_version}"
                for x in result.drift
            )
        else:
            verdict, detail = "ok", "ok"
        verdicts.append(
            RunVerdict(
                result.run_id,
                result.workflow,
                verdict,
                detail,
                result.drift,
                result.old_patches,
                recorded,
            )
        )
    return tuple(verdicts)


def check(
    app: App,
    settings: Settings,
    log: EventLog,
    serde: Serde,
    schema_dir: Path = DEFAULT_SCHEMA_DIR,
    run_ids: Collection[str] | None = None,
) -> UpgradeReport:
    """The whole gate: schemas, in-flight runs (``run_ids``: only those, e.g. :func:`store_in_flight`),
    their shadow replays."""
    schemas = check_schemas(settings, schema_dir)
    histories, skipped = in_flight_histories(log, serde, settings, run_ids)
    return UpgradeReport(schemas, shadow_replay(app, histories), tuple(skipped))
