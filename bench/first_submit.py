"""What a fresh process pays for its first submission: ``Client()`` -> ``submit`` -> ``flush``.

Each sample is a new Python process (as ``agentlog submit`` from a shell is), so nothing of an
earlier sample is warm but the OS's file cache. Printed (JSON lines, ``mode: "first-submit"``):
the medians of ``n`` samples of constructing the client, the first ``submit`` call (encoding,
with the registry lookup of RunSubmitted's schema id), the ``flush`` that waits for the ack
(including the producer's connection and ProducerId), and their total; then a second
submission in the same process, for comparison.

Run: `python bench/first_submit.py [n]` (services up). Runs against any checkout of the client.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _deploy import ROOT, env_for, fresh_deployment

_SAMPLE = """
import json, time
t0 = time.perf_counter()
from runtime.client import Client
from runtime.config import load_settings
settings = load_settings()
t1 = time.perf_counter()
client = Client(settings)
t2 = time.perf_counter()
client.submit("no-such-workflow-first-submit-bench", {})
t3 = time.perf_counter()
client.flush()
t4 = time.perf_counter()
client.submit("no-such-workflow-first-submit-bench", {})
client.flush()
t5 = time.perf_counter()
client.close()
print(json.dumps({"imports": t1 - t0, "construct": t2 - t1, "submit": t3 - t2, "flush": t4 - t3,
                  "first_total": t4 - t1, "second_submit_and_flush": t5 - t4}))
"""


def sample(env: dict[str, str]) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", _SAMPLE], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    parsed: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    env = env_for(fresh_deployment(partitions=12, prefix="first-submit"))  # no worker reads it
    samples = [sample(env) for _ in range(n)]
    print(
        json.dumps(
            {
                "mode": "first-submit",
                "samples": n,
                "unit": "ms (median)",
                **{
                    key: round(statistics.median(s[key] for s in samples) * 1000, 1)
                    for key in samples[0]
                },
                "first_total_each": [round(s["first_total"] * 1000, 1) for s in samples],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
