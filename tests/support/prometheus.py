"""A real Prometheus server (Debian's ``prometheus``) for one test: its own config, data folder and
free port, scraping the targets the test names every second; queried through its HTTP API."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx

from support.wait import stop_process, wait_until

BINARY = "/usr/bin/prometheus"  # infra/debian-packages.txt; `make setup` installs it


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick for a socket bound to port 0)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrometheusServer:
    def __init__(self, folder: Path, targets: dict[str, int]) -> None:
        """``targets``: job name -> port on 127.0.0.1 whose /metrics it scrapes every second."""
        if shutil.which(BINARY) is None:
            raise AssertionError(
                f"{BINARY} is missing: install Debian's prometheus (tools/system_packages.sh)"
            )
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        jobs = "".join(
            f"  - job_name: {job}\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
            for job, port in targets.items()
        )
        config = folder / "prometheus.yml"
        config.write_text(f"global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n{jobs}")
        self.log_path = folder / "prometheus.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [
                BINARY,
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        wait_until(
            self._ready, 60, "prometheus to be ready", interval=0.2, process=self.proc, detail=self.log_tail
        )

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector ``promql`` evaluates to now (``data.result`` of /api/v1/query)."""
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5).json()
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def value(self, promql: str) -> float | None:
        """The single value of ``promql`` now, or None if it has no sample."""
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def targets_up(self) -> dict[str, str]:
        """Job -> health ("up", "down", "unknown") of each scraped target."""
        answer = httpx.get(f"{self.url}/api/v1/targets", timeout=5).json()
        return {t["labels"]["job"]: t["health"] for t in answer["data"]["activeTargets"]}

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()
