"""The AxonOps schema registry (Confluent REST API at the root path), stored in PostgreSQL.

The binary is built once per version from the Go module proxy in a scratch module
(``go install ...@version`` is refused here) and cached under ``~/.cache/agentlog``.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from infra import postgres, process
from infra.errors import ServiceError
from infra.paths import cache_root, file_lock, state_dir
from infra.progress import StepTimeout, files_under, run_step
from runtime.config import Settings

SERVICE = "schema-registry"
VERSION = "v0.2.1"
MODULE = "github.com/axonops/axonops-schema-registry"
PACKAGE = f"{MODULE}/cmd/schema-registry"
HOST = "127.0.0.1"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
BUILD_TIMEOUT = 900.0


def binary_path() -> Path:
    """The cached registry binary of the pinned version."""
    return cache_root() / f"schema-registry-{VERSION}" / "schema-registry"


def _go() -> str:
    found = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").is_file() else None)
    if found is None:
        raise ServiceError(SERVICE, "Go is not installed; it builds the schema registry (https://go.dev/dl/)")
    return found


def ensure_binary(progress: Callable[[str], None]) -> Path:
    """Build the registry at the pinned version unless it is cached; return the binary."""
    binary = binary_path()
    with file_lock(binary.parent.parent / f"{binary.parent.name}.lock"):
        if binary.is_file() and os.access(binary, os.X_OK):
            return binary
        go = _go()
        progress(f"building the schema registry {VERSION} with go into {binary} (about a minute when cold)")
        binary.parent.mkdir(parents=True, exist_ok=True)
        build_log = binary.parent / "build.log"
        partial = binary.with_name(binary.name + ".partial")
        steps = [
            ("go mod init", [go, "mod", "init", "agentlog-registry-build"]),
            (f"go fetching {MODULE}@{VERSION} and its modules", [go, "get", f"{PACKAGE}@{VERSION}"]),
            (
                "go compiling the registry",
                [
                    go,
                    "build",
                    "-trimpath",
                    "-ldflags",
                    f"-s -w -X main.version={VERSION}",
                    "-o",
                    str(partial),
                    PACKAGE,
                ],
            ),
        ]
        with (
            tempfile.TemporaryDirectory(prefix="agentlog-registry-build-") as scratch,
            build_log.open("wb") as log,
        ):
            for what, argv in steps:
                log.write(f"$ {' '.join(argv)}\n".encode())
                log.flush()
                try:
                    code = run_step(
                        argv,
                        what=what,
                        progress=progress,
                        log=log,
                        measure=_modules_so_far,
                        cwd=scratch,
                        timeout=BUILD_TIMEOUT,
                    )
                except StepTimeout as exc:
                    raise ServiceError(SERVICE, f"`{' '.join(argv[:3])}` timed out", build_log) from exc
                if code != 0:
                    raise ServiceError(
                        SERVICE,
                        f"building the registry failed at `{' '.join(argv[:3])}` (exit {code})",
                        build_log,
                    )
        partial.replace(binary)
    return binary


def _modules_so_far() -> str:
    count, size = files_under(_go_mod_cache() / "cache" / "download", "*.zip")
    return f"{count} Go modules in the module cache ({size >> 20} MB)"


def _go_mod_cache() -> Path:
    configured = os.environ.get("GOMODCACHE")
    if configured:
        return Path(configured)
    return Path(os.environ.get("GOPATH") or Path.home() / "go").joinpath("pkg", "mod")


def home_dir(settings: Settings) -> Path:
    return state_dir(settings) / "registry"


def log_path(settings: Settings) -> Path:
    return home_dir(settings) / "registry.log"


def pid_path(settings: Settings) -> Path:
    return home_dir(settings) / "registry.pid"


def url(settings: Settings) -> str:
    """The registry's base URL (the Confluent API is at the root path)."""
    return f"http://{HOST}:{settings.registry_port}"


def running_pid(settings: Settings) -> int | None:
    return process.read_pid(pid_path(settings))


def environment(settings: Settings) -> dict[str, str]:
    """The registry's environment: ours without SCHEMA_REGISTRY_*, plus its listen and storage settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEMA_REGISTRY_")}
    env.update(
        {
            "SCHEMA_REGISTRY_HOST": HOST,
            "SCHEMA_REGISTRY_PORT": str(settings.registry_port),
            "SCHEMA_REGISTRY_STORAGE_TYPE": "postgresql",
            "SCHEMA_REGISTRY_PG_HOST": postgres.HOST,
            "SCHEMA_REGISTRY_PG_PORT": str(settings.postgres_port),
            "SCHEMA_REGISTRY_PG_USER": postgres.ROLE,
            "SCHEMA_REGISTRY_PG_PASSWORD": postgres.password(settings),  # must not be empty
            "SCHEMA_REGISTRY_PG_DATABASE": postgres.DATABASE,
            "SCHEMA_REGISTRY_PG_SSLMODE": "disable",
        }
    )
    return env


def answers(settings: Settings, timeout: float = 2.0) -> bool:
    """Whether ``GET /subjects`` answers 200 (its body is ``null`` while no subject exists)."""
    try:
        with urllib.request.urlopen(f"{url(settings)}/subjects", timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def start(settings: Settings, progress: Callable[[str], None]) -> int:
    """Start the registry unless it is running; wait until it answers; return its pid."""
    pid = running_pid(settings)
    started = pid is None
    if pid is None:
        binary = ensure_binary(progress)
        log = log_path(settings)
        process.ensure_port_free(SERVICE, HOST, settings.registry_port, log)
        home_dir(settings).mkdir(parents=True, exist_ok=True)
        progress(f"starting the schema registry on {url(settings)}")
        pid = process.start_detached(
            [str(binary)],
            log_path=log,
            pid_path=pid_path(settings),
            env=environment(settings),
            cwd=home_dir(settings),
        )
    try:
        process.wait_until(
            SERVICE,
            lambda: answers(settings),
            what=f"GET {url(settings)}/subjects to answer",
            timeout=START_TIMEOUT,
            log_path=log_path(settings),
            pid=pid,
        )
    except ServiceError:
        if started:  # leave a process that was already running to whoever runs it
            process.stop_pid(pid, timeout=10.0)
            pid_path(settings).unlink(missing_ok=True)
        raise
    return pid


def stop(settings: Settings) -> int | None:
    """Stop the registry (SIGTERM, SIGKILL after 30 s); return its pid if it ran."""
    try:
        return process.stop_pid_file(pid_path(settings), sig=signal.SIGTERM, timeout=STOP_TIMEOUT)
    except OSError as exc:
        raise ServiceError(SERVICE, f"could not stop: {exc}", log_path(settings)) from exc
