"""``audit diff``'s logic on events shaped as the store returns them (analytics.diff.diff_steps)."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest

from analytics import diff

pytestmark = pytest.mark.unit


def run(
    decisions: list[str], refund_key: str = "k-refund", extra_effect: bool = False
) -> list[dict[str, Any]]:
    """A run: a decision (model) then a tool per step; step 2's tool is the refund."""
    out: list[dict[str, Any]] = [{"type": "RunStarted", "seq": 1}]
    position = 0
    for step, decision in enumerate(decisions, start=1):
        position += 1
        out.append(
            {
                "type": "ModelCallScheduled",
                "position": position,
                "model": "planner",
                "args_hash": f"m{step}",
                "prompt_version": "v1",
            }
        )
        out.append({"type": "ModelCallCompleted", "position": position, "result": decision})
        position += 1
        refund = step == 2
        out.append(
            {
                "type": "ToolCallScheduled",
                "position": position,
                "tool": "refund" if refund else "lookup",
                "args_hash": f"t{step}",
                "args": '{"order": "1"}',
                "effect": refund,
                "idempotency_key": refund_key if refund else None,
            }
        )
        out.append({"type": "ToolCallCompleted", "position": position, "result": "{}"})
    if extra_effect:
        position += 1
        out.append(
            {
                "type": "ToolCallScheduled",
                "position": position,
                "tool": "send_email",
                "args_hash": "e",
                "args": "{}",
                "effect": True,
                "idempotency_key": "k-mail",
            }
        )
        out.append(
            {
                "type": "ToolCallFailed",
                "position": position,
                "error_type": "Down",
                "error": "smtp",
                "final": True,
            }
        )
    return out


def test_identical_runs_have_no_divergence() -> None:
    result = diff.diff_steps("a", "b", run(["x", "y"]), run(["x", "y"]))
    assert result["identical"] is True and result["first_divergence"] is None and result["differences"] == []
    assert result["counts"]["a"] == result["counts"]["b"]


def test_the_first_divergence_is_the_lowest_differing_position_with_both_sides() -> None:
    result = diff.diff_steps("a", "b", run(["x", "y", "z"]), run(["x", "Y", "Z"]))
    first = result["first_divergence"]
    assert first["position"] == 3 and first["differs"] == ["decision"]
    assert (first["a"]["result"], first["b"]["result"]) == ("y", "Y")
    assert (first["a"]["name"], first["a"]["args_hash"]) == ("planner", "m2")
    assert [d["position"] for d in result["differences"]] == [3, 5]


def test_inputs_outcomes_missing_calls_and_effects() -> None:
    a = run(["x", "y"], refund_key="k1")
    b = run(["x", "y"], refund_key="k2", extra_effect=True)
    next(e for e in b if e["type"] == "ModelCallScheduled" and e["position"] == 3)["args_hash"] = "changed"
    result = diff.diff_steps("a", "b", a, b)
    by_position = {d["position"]: d["differs"] for d in result["differences"]}
    assert by_position == {3: ["input"], 4: ["key"], 5: ["missing"]}
    assert result["counts"]["b"]["effects"] == 2 and result["counts"]["b"]["failures"] == 1
    effects = result["effects"]
    assert [e["idempotency_key"] for e in effects["only_a"]] == ["k1"]
    assert sorted(e["idempotency_key"] for e in effects["only_b"]) == ["k-mail", "k2"]


def test_a_different_key_is_a_difference_a_shared_one_is_one_effect() -> None:
    # Keys derive from the run: a reset keeps the original's keys (the world sees one action), a
    # fresh run has its own (the world sees two).
    result = diff.diff_steps("a", "b", run(["x", "y"], refund_key="k1"), run(["x", "y"], refund_key="k2"))
    assert [(d["position"], d["differs"]) for d in result["differences"]] == [(4, ["key"])]
    assert [e["idempotency_key"] for e in result["effects"]["only_a"]] == ["k1"]
    shared = diff.diff_steps("a", "b", run(["x", "y"]), run(["x", "y"]))["effects"]
    assert [e["idempotency_key"] for e in shared["both"]] == ["k-refund"] and shared["only_a"] == []


def test_usage_and_prompts_come_from_the_store_when_present() -> None:
    usage = {1: {"input_tokens": 10, "output_tokens": 2, "cost_usd": 0.5, "messages": '[{"role":"user"}]'}}
    result = diff.diff_steps("a", "b", run(["x"]), run(["x"]), usage, {1: {**usage[1], "cost_usd": 0.75}})
    assert result["usage"] == {
        "a": {"input_tokens": 10, "output_tokens": 2, "cost_usd": 0.5},
        "b": {"input_tokens": 10, "output_tokens": 2, "cost_usd": 0.75},
    }
    assert result["aligned"][0]["a"]["inputs"] == '[{"role":"user"}]'


def test_the_text_shows_the_first_divergence_side_by_side() -> None:
    out = io.StringIO()
    diff.print_diff(diff.diff_steps("a", "b", run(["x", "y"]), run(["x", "Y"])), out)
    text = out.getvalue()
    assert "first divergence at position 3: decision" in text
    assert re.search(r"result\s+y\s+Y", text), text
    assert "1 more differing positions" not in text  # position 3 is the only one


def test_an_effect_a_fork_skipped_is_not_taken_by_it() -> None:
    # A fork runs effects dry: the worker records {"skipped": "fork"} and never calls the tool, under
    # the original's key. The world saw one refund, by A; the diff must not say "taken by both".
    original = run(["x", "y"])
    forked = run(["x", "y"])
    refund = next(e for e in forked if e["type"] == "ToolCallCompleted" and e["position"] == 4)
    refund["result"] = '{"skipped":"fork"}'
    effects = diff.diff_steps("a", "b", original, forked)["effects"]
    assert effects["both"] == [] and effects["only_b"] == [] and effects["skipped_a"] == []
    assert [e["idempotency_key"] for e in effects["only_a"]] == ["k-refund"]
    assert [(e["idempotency_key"], e["outcome"]) for e in effects["skipped_b"]] == [
        ("k-refund", "skipped (fork)")
    ]


def test_a_call_a_fork_copied_from_its_original_is_not_counted_in_the_forks_cost() -> None:
    # The fork's call at position 1 is the original's, copied (the original paid for it, once);
    # its own call at position 3 is new. audit cost leaves copied calls out; so does the diff.
    paid = {"input_tokens": 10, "output_tokens": 2, "cost_usd": 0.5, "copied": False}
    usage_a = {1: paid, 3: paid}
    usage_b = {1: {**paid, "copied": True}, 3: {**paid, "cost_usd": 0.75}}
    result = diff.diff_steps("a", "b", run(["x", "y"]), run(["x", "y"]), usage_a, usage_b)
    assert result["usage"]["a"] == {"input_tokens": 20, "output_tokens": 4, "cost_usd": 1.0}
    assert result["usage"]["b"] == {"input_tokens": 10, "output_tokens": 2, "cost_usd": 0.75}
