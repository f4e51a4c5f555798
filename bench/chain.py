"""What the runs' hash chain (runtime.log.records.chain) adds to a step: bytes and CPU. Prints JSON lines.

A step of the refund-40 agent writes 4.05 records (bench/refund40.py, figure B): a model call
scheduled and completed, a tool call scheduled and completed. Here those four records are encoded
as the worker encodes them (the offline serde: the same compiled encoders, no registry), then
sealed as the worker seals them, and the two are timed in the same process, interleaved: the
figures to put beside refund40's worker CPU per step (figure T, BENCH_CHAIN_KEY on and off),
which a shared machine makes noisy.

Run: `python bench/chain.py [ROUNDS]`.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime.config import Settings
from runtime.log.records.chain import START, ChainKey, first_break, link_of, seal
from runtime.log.records.events import (
    Event,
    ModelCallCompleted,
    ModelCallScheduled,
    ToolCallCompleted,
    ToolCallScheduled,
)
from runtime.log.schemas.serde import Serde

RUN = "refund-48211-0000-4a8e-9c1d-6f3b2a1e0d97"
KEY = ChainKey(b"bench chain key")


def step_records(step: int) -> list[Event]:
    envelope: dict[str, Any] = {"run_id": RUN, "occurred_at": 1_764_750_000_000 + step, "worker": "bench-0", "epoch": 1234}
    return [
        ModelCallScheduled(
            **envelope,
            seq=4 * step + 1,
            position=2 * step + 1,
            model="gpt-4o-mini",
            args_hash="9f2b" * 16,
            message_count=2 * step + 2,
            message_slots=[0, 1, 2 * step + 1],
            new_roles=["user"],
            new_messages=[f"step {step}: look up order 48211 and decide the next action"],
        ),
        ModelCallCompleted(
            **envelope,
            seq=4 * step + 2,
            position=2 * step + 1,
            result=json.dumps({"action": "lookup", "order": "48211", "step": step, "reason": "x" * 60}),
            latency_us=812,
            input_tokens=412,
            output_tokens=38,
        ),
        ToolCallScheduled(
            **envelope,
            seq=4 * step + 3,
            position=2 * step + 2,
            tool="lookup",
            args_hash="1c7e" * 16,
            args=json.dumps({"order": "48211", "step": step}),
        ),
        ToolCallCompleted(
            **envelope,
            seq=4 * step + 4,
            position=2 * step + 2,
            result=json.dumps({"order": "48211", "status": "shipped", "amount": 129.5}),
            latency_us=95,
        ),
    ]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    serde = Serde.offline(Settings())
    steps = [step_records(step) for step in range(40)]
    key_of_run = RUN.encode()

    def encode_only() -> None:
        for records in steps:
            for record in records:
                serde.encode(record)

    def encode_and_seal() -> None:
        tip = START
        for records in steps:
            for record in records:
                value = seal(KEY, key_of_run, tip, serde.encode(record))
                tip = value[-8:]

    plain_s, sealed_s = 0.0, 0.0
    for _ in range(rounds // 40):
        started = time.process_time()
        encode_only()
        plain_s += time.process_time() - started
        started = time.process_time()
        encode_and_seal()
        sealed_s += time.process_time() - started
    steps_timed = (rounds // 40) * 40
    plain_bytes = sum(len(serde.encode(r)) for r in steps[7])
    tip, sealed = START, []
    for record in steps[7]:
        sealed.append(seal(KEY, key_of_run, tip, serde.encode(record)))
        tip = link_of(sealed[-1]) or b""
    print(
        json.dumps(
            {
                "metric": "chain_cost",
                "steps": steps_timed,
                "records_per_step": 4,
                "encode_us_per_step": round(plain_s / steps_timed * 1e6, 2),
                "encode_and_seal_us_per_step": round(sealed_s / steps_timed * 1e6, 2),
                "seal_us_per_step": round((sealed_s - plain_s) / steps_timed * 1e6, 2),
                "link_bytes_per_record": len(sealed[0]) - len(serde.encode(steps[7][0])),
                "value_bytes_per_step_without_field": plain_bytes - 4,
                "value_bytes_per_step_unchained_field": plain_bytes,
                "value_bytes_per_step_sealed": sum(len(v) for v in sealed),
                "verifies": first_break(KEY, RUN, sealed) is None,
            }
        )
    )


if __name__ == "__main__":
    main()
