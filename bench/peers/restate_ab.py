"""Which of Restate's set-up settings move its L, T and R: bench/peers/restate_bench.py run with each
variant in turn, the variants alternating round by round (one JSON line each, then a table).

Variants (``VARIANTS``): the service's HTTP/2 stream limit at hypercorn's default (100) or unbounded
(as Restate's SDK serves), and restate-server's RocksDB memory capped at 512 MB (what
bench/peers/restate_bench.py set before issue 42) or at the server's default (2 GiB). While each
runs, the established TCP connections from restate-server to the service's port are sampled
(/proc/net/tcp, every 0.1 s): a stream limit binds only if the runs in flight exceed the
connections times the limit.

Run in the peers' virtualenv (bench/peers/install.sh):
`.agentlog/peers/venv/bin/python -m bench.peers.restate_ab [--rounds 2] [--workload sync] [--t-runs 200]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {
    "streams 100, RocksDB 512 MB": ["--h2-max-streams", "100", "--rocksdb-memory", "512MB"],
    "streams unbounded, RocksDB 512 MB": ["--rocksdb-memory", "512MB"],
    "streams 100, RocksDB default": ["--h2-max-streams", "100"],
    "streams unbounded, RocksDB default (configured)": [],
}
_ESTABLISHED = "01"


def connections_to(port: int) -> int:
    """Established IPv4 TCP connections whose remote port is ``port`` (the server's side of them)."""
    found = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == _ESTABLISHED and int(fields[2].rsplit(":", 1)[1], 16) == port:
            found += 1
    return found


def run(variant: list[str], workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    service_port = args.port_base + 10
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            peak[0] = max(peak[0], connections_to(service_port))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        finished = subprocess.run(
            [sys.executable, "-m", "bench.peers.restate_bench", "--binary", str(args.binary), "--workdir", str(workdir),
             "--port-base", str(args.port_base), "--workload", args.workload, "--l-runs", str(args.l_runs),
             "--t-runs", str(args.t_runs), *variant],
            cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
    finally:
        done.set()
        sampler.join()
    if finished.returncode != 0:
        raise SystemExit(f"restate_bench failed ({finished.returncode}):\n{finished.stderr[-3000:]}")
    found: dict[str, Any] = json.loads(finished.stdout.strip().splitlines()[-1])
    found["peak_connections_to_service"] = peak[0]
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--binary", type=Path, default=ROOT / ".agentlog" / "peers" / "package" / "bin" / "restate-server"
    )
    parser.add_argument("--port-base", type=int, default=29070)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workload", choices=("async", "sync"), default="sync")
    parser.add_argument("--l-runs", type=int, default=3)
    parser.add_argument("--t-runs", type=int, default=200)
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="agentlog-restate-ab-") as tmp:
        for round_ in range(args.rounds):
            for index, (name, flags) in enumerate(VARIANTS.items()):
                found = run(flags, Path(tmp) / f"{round_}-{index}", args)
                results[name].append(found)
                print(json.dumps({"variant": name, "round": round_ + 1, **found}), flush=True)
    print(f"\n{args.workload} workload, {args.t_runs} runs for T (rounds 1 / 2 / ...):\n")
    print(
        "| variant | L, ms a step | T, steps/s | CPU, ms a step | R, s | connections to the service, peak |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, rows in results.items():
        cells = [
            " / ".join(f"{r[key]:g}" for r in rows) + f" (median {statistics.median(r[key] for r in rows):g})"
            for key in (
                "L_ms_per_step",
                "T_steps_per_s",
                "CPU_ms_per_step",
                "R_s",
                "peak_connections_to_service",
            )
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
