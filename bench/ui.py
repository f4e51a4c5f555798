"""Page load times of ``agentlog ui`` on a large store.

    python bench/ui.py [--events 1000000] [--long-run 10000] [--repeat 5] [--browser]

Needs the local services (``agentlog infra up``). Fills fresh topics with about ``--events``
events (bench/sink.py's 18-event runs, re-keyed per run id) plus one long run of ``--long-run``
events, runs ``agentlog sink`` into a fresh embedded store until it holds every record, then
serves the UI in this process -- reading the store through the sink's query port, as it does
next to a live sink -- and times each page: the full HTTP response (``--repeat`` times, after one
warm-up), and with ``--browser`` the browser's navigation-to-load time in Debian's Chromium.
Prints one JSON object per line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from sink import prefill, run_template  # noqa: E402  (bench/sink.py)

from analytics.store import connect  # noqa: E402
from infra.deployment import environment, scratch_deployment  # noqa: E402
from runtime.config import Settings, load_settings  # noqa: E402
from runtime.log.schemas.serde import Serde  # noqa: E402
from ui.server import UiServer  # noqa: E402

LONG_RUN = "bench-long-run"


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def produce_long_run(settings: Settings, events: int) -> int:
    """One run of about ``events`` events (model + tool call per step), like a run near its limit."""
    serde = Serde(settings)
    records = run_template(LONG_RUN, steps=max(1, (events - 2) // 4))
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers, "enable.idempotence": True})
    for record in records:
        while True:
            try:
                producer.produce(settings.events_topic, key=LONG_RUN.encode(), value=serde.encode(record))
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)
    return len(records)


def stored_rows(dsn: str) -> int:
    try:
        with connect(dsn, wait=5) as store:
            return int(store.query("SELECT count() FROM agentlog.events").rows[0][0])
    except Exception:  # the sink has not created or migrated the store yet
        return -1


def fetch(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=300) as response:
        body = response.read()
        assert response.status == 200, (url, response.status)
    return time.perf_counter() - started, len(body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--long-run", type=int, default=10_000, help="events of the one long run")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--port", type=int, default=25300)
    parser.add_argument("--browser", action="store_true", help="also time each page in Chromium")
    parser.add_argument("--keep", action="store_true", help="keep the store (its path is printed)")
    args = parser.parse_args()

    settings = scratch_deployment(load_settings(), args.partitions, prefix="bench-ui-")
    emit(metric="setup", topic=settings.events_topic, partitions=args.partitions, cpus=os.cpu_count())
    total, sample = prefill(settings, args.events)
    total += produce_long_run(settings, args.long_run)
    workdir = Path(tempfile.mkdtemp(prefix="agentlog-bench-ui-"))
    dsn = f"chdb://{workdir / 'store'}"
    log = open(workdir / "sink.log", "ab")  # noqa: SIM115 - lives as long as the sink
    sink = subprocess.Popen(
        [sys.executable, "-m", "runtime.cli", "sink", "--dsn", dsn],
        cwd=ROOT,
        env=environment(settings, str(ROOT)),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    server: UiServer | None = None
    try:
        started = time.perf_counter()
        while (rows := stored_rows(dsn)) < total:
            if sink.poll() is not None:
                raise RuntimeError(f"the sink exited: {(workdir / 'sink.log').read_text()[-2000:]}")
            time.sleep(1)
        emit(metric="store", rows=rows, runs_approx=total // 18, sink_seconds=round(time.perf_counter() - started, 1))

        server = UiServer(settings, dsn, "127.0.0.1", args.port)
        server.start()
        base = server.url.rstrip("/")
        pages = {
            "runs (default: newest 200)": "/",
            "runs, status=completed, sort by bytes": "/?status=completed&sort=bytes",
            "runs, near history limit": "/?near=1",
            "run (18 events)": f"/run/{sample[0]}",
            f"run ({args.long_run} events)": f"/run/{LONG_RUN}",
            "diff (two 18-event runs)": f"/diff?a={sample[0]}&b={sample[1]}",
            "run version (live poll)": f"/run/{sample[0]}/version",
        }
        for name, path in pages.items():
            fetch(base + path)  # warm-up
            times, size = [], 0
            for _ in range(args.repeat):
                seconds, size = fetch(base + path)
                times.append(seconds)
            emit(
                metric="page",
                page=name,
                rows=rows,
                bytes=size,
                median_ms=round(statistics.median(times) * 1000),
                min_ms=round(min(times) * 1000),
                max_ms=round(max(times) * 1000),
                load_avg_1m=os.getloadavg()[0],
            )
        if args.browser:
            from support.browser import chromium

            with chromium() as browser:
                page = browser.new_page(viewport={"width": 1440, "height": 1000})
                for name, path in pages.items():
                    if path.endswith("/version"):
                        continue
                    page.goto(base + path)
                    took = page.evaluate(
                        "() => { const n = performance.getEntriesByType('navigation')[0];"
                        " return n.loadEventEnd - n.startTime; }"
                    )
                    emit(metric="browser_load", page=name, rows=rows, ms=round(float(took)))
    finally:
        if server is not None:
            server.stop()
        sink.terminate()
        sink.wait(60)
        log.close()
        if args.keep:
            emit(metric="kept", dsn=dsn, topic=settings.events_topic)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        admin.delete_topics([settings.events_topic, settings.commands_topic, settings.checkpoints_topic])
    return 0


if __name__ == "__main__":
    sys.exit(main())
