"""The cost of sealing in CPU instructions, which other load on the machine does not change. Prints JSON lines.

I  instructions per step (valgrind's callgrind, user space) to encode and chain the records of a
   refund-40 run -- 10 runs' worth, interleaved as a worker sees them -- contents in the clear and
   sealed (the compiled encoders seal as they write). Each figure is the difference between two
   passes over the records and none, so start-up drops out.

The worker's CPU per step (bench/erasure.py) swings by 20 % between sittings on a shared 2-core
machine; an instruction count does not, so two versions of the sealing code compare exactly (run
this script from a worktree of each). It is not time: a cache miss costs no instruction, and under
valgrind OpenSSL's AES runs without the CPU's AES instructions, so the AES share is overstated.

Run: `python bench/erasure_instructions.py` (needs valgrind; no services; ~3 min).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import pickle
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.records.chain import ChainKey
from runtime.log.records.chain import seal as chain_seal
from runtime.log.schemas.serde import Serde
from runtime.log.sealing.keys import KeyStore
from runtime.log.sealing.sealer import Sealer

ROOT = Path(__file__).resolve().parent.parent
STEPS = 40
RUNS = 10
PASSES = 2


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def record_run(path: Path) -> None:
    """One refund-40 run on the in-memory log; its events' bytes and keys kept in ``path``."""
    from examples.refund_agent import app
    from runtime.client import Client
    from runtime.worker.loop import Worker

    settings = Settings(partitions=1)
    log, serde = MemoryLog(settings), Serde.offline(settings)
    worker = Worker(app, settings, log=log, serde=serde, worker_id="bench", checkpoint_interval_s=3600)
    thread = threading.Thread(target=lambda: asyncio.run(worker.serve()), daemon=True)
    thread.start()
    try:
        with Client(settings, identity="bench", log=log, serde=serde) as client:
            client.submit("refund", {"order": "bulk-1"}).result(timeout=120)
    finally:
        worker.stop()
        thread.join(timeout=10)
    path.write_bytes(pickle.dumps([(r.value, r.key) for r in log.read(settings.events_topic, 0)]))


def work(what: str, passes: int, records: Path) -> None:
    """What runs under valgrind: ``passes`` passes of ``what`` over the recorded run's events."""
    settings = Settings(partitions=1)
    serde = Serde.offline(settings)
    events = [serde.decode(value, key) for value, key in pickle.loads(records.read_bytes())]
    mixed = [dataclasses.replace(e, run_id=f"run-{i:02d}-{'x' * 20}") for e in events for i in range(RUNS)]
    if what != "plain":
        serde.sealer = Sealer(KeyStore(MemoryLog(settings), settings.keys_topic, 1))
    key = ChainKey(b"k" * 32)
    encode = serde.encode
    for event in mixed[:200]:  # first use: ciphers made, encoders compiled
        encode(event)
    for _ in range(passes):
        for event in mixed:
            chain_seal(key, b"run", b"", encode(event))


def instructions(what: str, passes: int, records: Path) -> int:
    out = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--work",
            what,
            str(passes),
            str(records),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    found = re.search(r"Collected : (\d+)", out)
    if found is None:
        raise SystemExit(f"valgrind printed no instruction count:\n{out[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(
        description="instructions per step to encode, chain and seal refund-40 records"
    )
    parser.add_argument("--work", nargs=3, metavar=("WHAT", "PASSES", "RECORDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.work:
        what, passes, records = args.work
        work(what, int(passes), Path(records))
        return
    with tempfile.TemporaryDirectory() as tmp:
        records = Path(tmp) / "refund40.pickle"
        record_run(records)
        for what in ("plain", "sealed"):
            base = instructions(what, 0, records)
            total = instructions(what, PASSES, records)
            emit(
                metric="I",
                what=f"encode+chain, {what}",
                instructions_per_step=(total - base) // (PASSES * RUNS * STEPS),
            )


if __name__ == "__main__":
    main()
