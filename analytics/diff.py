"""``agentlog audit diff RUN_A RUN_B``: two runs aligned by position, where they first part, and how else.

Positions are the runtime's own call numbering (the replayer compares code with history by
position), so a run reset or forked from another shares its positions up to the seam and is
compared call by call. At each position a side holds a call (kind, name, the hash of its canonical
arguments, the arguments or prompt when the store has them, the result or error) or nothing. Two
positions differ when the call differs in kind or name (``call``), in its input (``input``: the
args hash), its prompt version, its idempotency key (``key``), in its answer (``decision`` for a model, ``result`` for a tool) or in its outcome; or
when one run has no call there (``missing``).

The first divergence is the lowest such position, shown with both prompts and both decisions;
the rest follows: every other differing position, the counts of each run, tokens and cost (when
the store has them, see ``analytics.explore``), and the effects -- effecting tool calls by
idempotency key: taken by both, only by A, only by B, and those a fork recorded as skipped
(never made: a fork runs effects dry) apart, so a dry run never reads as a second action.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from runtime.log.records.status import SKIPPED_IN_FORK

from . import render
from .audit import AuditError, run_events
from .explore import call_usage, run_summary
from .results import JsonValue
from .store import QueryStore

_CALL_KINDS = {"ModelCall": "model", "ToolCall": "tool"}


@dataclass
class Step:
    """One run's call at one position."""

    position: int
    kind: str  # model, tool, timer, patch
    name: str | None
    args_hash: JsonValue = None
    inputs: JsonValue = None  # the prompt (messages) of a model call, the arguments of a tool call
    prompt_version: JsonValue = None
    result: JsonValue = None
    error: JsonValue = None
    outcome: str = "pending"
    attempts: int = 0
    in_doubt: bool = False
    effect: bool = False
    idempotency_key: JsonValue = None
    usage: dict[str, JsonValue] = field(default_factory=dict)

    def as_dict(self) -> dict[str, JsonValue]:
        return {
            "position": self.position,
            "kind": self.kind,
            "name": self.name,
            "args_hash": self.args_hash,
            "inputs": self.inputs,
            "prompt_version": self.prompt_version,
            "result": self.result,
            "error": self.error,
            "outcome": self.outcome,
            "attempts": self.attempts,
            "in_doubt": self.in_doubt,
            "effect": self.effect,
            "idempotency_key": self.idempotency_key,
            **({"usage": self.usage} if self.usage else {}),
        }


def steps_of(
    events: Sequence[Mapping[str, JsonValue]], usage: Mapping[int, Mapping[str, JsonValue]] | None = None
) -> dict[int, Step]:
    """Position -> the run's call there, from its events in log order."""
    usage = usage or {}
    steps: dict[int, Step] = {}
    for event in events:
        kind = event.get("type")
        position = event.get("position")
        if not isinstance(kind, str) or not isinstance(position, int):
            continue
        prefix = next((p for p in _CALL_KINDS if kind.startswith(p)), None)
        if prefix is not None:
            step = steps.setdefault(position, Step(position, _CALL_KINDS[prefix], None))
            phase = kind[len(prefix) :]
            if phase == "Scheduled":
                step.name = str(event.get("model") or event.get("tool") or "") or None
                step.args_hash = event.get("args_hash")
                step.inputs = event.get("args")
                step.prompt_version = event.get("prompt_version")
                step.effect = bool(event.get("effect"))
                step.idempotency_key = event.get("idempotency_key")
            elif phase in ("Completed", "Failed"):
                step.attempts += 1
                step.in_doubt = step.in_doubt or bool(event.get("in_doubt"))
                if phase == "Completed":
                    step.outcome, step.result = "completed", event.get("result")
                    if step.result is None and event.get("result_sha256"):
                        step.result = f"sha256:{event.get('result_sha256')}"
                else:
                    final = event.get("final")
                    step.outcome = "failed" if final is None or bool(final) else "retrying"
                    step.error = f"{event.get('error_type')}: {event.get('error')}"
        elif kind == "TimerScheduled":
            steps[position] = Step(
                position, "timer", str(event.get("name") or "sleep"), inputs=event.get("duration_ms")
            )
        elif kind == "TimerFired" and position in steps:
            steps[position].outcome = "completed"
        elif kind == "PatchRecorded":
            steps[position] = Step(position, "patch", str(event.get("patch_id")), outcome="completed")
    for position, step in steps.items():
        found = usage.get(position)
        if step.kind == "model" and found:
            step.usage = {k: v for k, v in found.items() if k not in ("messages", "params")}
            if found.get("messages") is not None:
                step.inputs = found["messages"]
    return steps


def compare(a: Step | None, b: Step | None) -> list[str]:
    """What differs between two runs' calls at one position (empty: the same)."""
    if a is None or b is None:
        return ["missing"] if (a is None) != (b is None) else []
    if (a.kind, a.name) != (b.kind, b.name):
        return ["call"]
    out: list[str] = []
    if a.args_hash != b.args_hash or (a.args_hash is None and a.inputs != b.inputs):
        out.append("input")
    if a.prompt_version != b.prompt_version:
        out.append("prompt_version")
    if a.idempotency_key != b.idempotency_key:
        out.append("key")  # the same effect under another key: the world sees a second action
    if a.result != b.result:
        out.append("decision" if a.kind == "model" else "result")
    if a.outcome != b.outcome or a.error != b.error:
        out.append("outcome")
    return out


def _counts(steps: Mapping[int, Step], events: Sequence[Mapping[str, JsonValue]]) -> dict[str, JsonValue]:
    return {
        "events": len(events),
        "model_calls": sum(1 for s in steps.values() if s.kind == "model"),
        "tool_calls": sum(1 for s in steps.values() if s.kind == "tool"),
        "effects": sum(1 for s in steps.values() if s.effect),
        "attempts": sum(s.attempts for s in steps.values()),
        "failures": sum(1 for s in steps.values() if s.outcome == "failed"),
        "in_doubt": sum(1 for s in steps.values() if s.in_doubt),
    }


def _usage_total(steps: Mapping[int, Step]) -> dict[str, JsonValue] | None:
    """Tokens and cost the run paid for: calls a reset or fork copied from its original are the
    original's (as in ``audit cost``)."""
    totals: dict[str, float] = {}
    for step in steps.values():
        if step.usage.get("copied"):
            continue
        for key, value in step.usage.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                totals[key] = totals.get(key, 0) + value
    return dict(totals) if totals else None


def _effects(a: Mapping[int, Step], b: Mapping[int, Step]) -> dict[str, list[dict[str, JsonValue]]]:
    def skipped(step: Step) -> bool:
        value = step.result
        if isinstance(value, str):  # results are stored as JSON text
            try:
                value = json.loads(value)
            except ValueError:
                return False
        return bool(value == SKIPPED_IN_FORK)

    def by_key(steps: Mapping[int, Step], *, dry: bool) -> dict[Any, Step]:
        return {
            (s.name, s.idempotency_key or f"#{s.position}"): s
            for s in steps.values()
            if s.effect and skipped(s) == dry
        }

    ka, kb = by_key(a, dry=False), by_key(b, dry=False)

    def row(key: Any, side: Step) -> dict[str, JsonValue]:
        return {
            "tool": key[0],
            "idempotency_key": side.idempotency_key,
            "position": side.position,
            "outcome": "skipped (fork)" if skipped(side) else side.outcome,
        }

    return {
        "both": [row(k, ka[k]) for k in ka if k in kb],
        "only_a": [row(k, ka[k]) for k in ka if k not in kb],
        "only_b": [row(k, kb[k]) for k in kb if k not in ka],
        "skipped_a": [row(k, step) for k, step in by_key(a, dry=True).items()],
        "skipped_b": [row(k, step) for k, step in by_key(b, dry=True).items()],
    }


def diff_steps(
    run_a: str,
    run_b: str,
    events_a: Sequence[Mapping[str, JsonValue]],
    events_b: Sequence[Mapping[str, JsonValue]],
    usage_a: Mapping[int, Mapping[str, JsonValue]] | None = None,
    usage_b: Mapping[int, Mapping[str, JsonValue]] | None = None,
) -> dict[str, JsonValue]:
    """The diff of two runs' events (pure: what ``audit diff --json`` prints, and the diff page shows)."""
    a, b = steps_of(events_a, usage_a), steps_of(events_b, usage_b)
    positions = sorted(set(a) | set(b))
    aligned: list[dict[str, JsonValue]] = []
    differences: list[dict[str, JsonValue]] = []
    for position in positions:
        what = compare(a.get(position), b.get(position))
        side_a, side_b = a.get(position), b.get(position)
        row: dict[str, JsonValue] = {
            "position": position,
            "differs": what,
            "a": side_a.as_dict() if side_a else None,
            "b": side_b.as_dict() if side_b else None,
        }
        aligned.append(row)
        if what:
            differences.append(row)
    return {
        "run_a": run_a,
        "run_b": run_b,
        "identical": not differences,
        "first_divergence": differences[0] if differences else None,
        "differences": differences,
        "counts": {"a": _counts(a, events_a), "b": _counts(b, events_b)},
        "usage": {"a": _usage_total(a), "b": _usage_total(b)},
        "effects": _effects(a, b),
        "aligned": aligned,
    }


def diff_runs(store: QueryStore, run_a: str, run_b: str, topic: str) -> dict[str, JsonValue]:
    """Read both runs from the store and diff them; AuditError names a run the store does not hold."""
    for run in (run_a, run_b):
        if run_summary(store, run) is None:
            raise AuditError(f"no run {run!r} in the store")
    result = diff_steps(
        run_a,
        run_b,
        run_events(store, run_a, topic),
        run_events(store, run_b, topic),
        call_usage(store, run_a),
        call_usage(store, run_b),
    )
    result["status"] = {
        "a": (run_summary(store, run_a) or {}).get("status"),
        "b": (run_summary(store, run_b) or {}).get("status"),
    }
    return result


def _short(value: JsonValue, width: int = 56) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def print_diff(result: Mapping[str, Any], out: TextIO) -> None:
    """The diff for people: the first divergence side by side, then the rest."""
    run_a, run_b = result["run_a"], result["run_b"]
    out.write(f"A = {run_a}\nB = {run_b}\n")
    first = result["first_divergence"]
    if first is None:
        out.write("\nidentical: the same calls, inputs and results at every position\n")
    else:
        out.write(f"\nfirst divergence at position {first['position']}: {', '.join(first['differs'])}\n")
        a, b = first["a"] or {}, first["b"] or {}
        rows = [
            {"": field_name, "A": a.get(field_name), "B": b.get(field_name)}
            for field_name in ("kind", "name", "prompt_version", "inputs", "result", "error", "outcome")
            if a.get(field_name) is not None or b.get(field_name) is not None
        ]
        render.table(
            ["", "A", "B"], [{k: _short(v) if k != "" else v for k, v in r.items()} for r in rows], out
        )
    rest = result["differences"][1:]
    if rest:
        out.write(f"\n{len(rest)} more differing positions\n")
        render.table(
            ["position", "differs", "A", "B"],
            [
                {
                    "position": d["position"],
                    "differs": ",".join(d["differs"]),
                    "A": _side(d["a"]),
                    "B": _side(d["b"]),
                }
                for d in rest
            ],
            out,
        )
    out.write("\ncounts\n")
    counts = result["counts"]
    render.table(["", *counts["a"].keys()], [{"": "A", **counts["a"]}, {"": "B", **counts["b"]}], out)
    usage = result["usage"]
    if usage["a"] or usage["b"]:
        out.write("\ntokens and cost\n")
        keys = sorted(set(usage["a"] or {}) | set(usage["b"] or {}))
        render.table(["", *keys], [{"": "A", **(usage["a"] or {})}, {"": "B", **(usage["b"] or {})}], out)
    effects = result["effects"]
    out.write("\neffects\n")
    render.table(
        ["taken by", "tool", "idempotency_key", "position", "outcome"],
        [{"taken by": EFFECT_SIDES[side], **e} for side in EFFECT_SIDES for e in effects.get(side, [])],
        out,
    )


EFFECT_SIDES = {
    "both": "both",
    "only_a": "only A",
    "only_b": "only B",
    "skipped_a": "none: A skipped it (fork)",
    "skipped_b": "none: B skipped it (fork)",
}


def _side(step: Mapping[str, Any] | None) -> str:
    if step is None:
        return "(none)"
    shown = step.get("result") if step.get("result") is not None else step.get("error")
    return f"{step['kind']} {step['name']}: {_short(shown, 40)}"
