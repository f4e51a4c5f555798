"""Detached service processes: start with a log and a pid file, check, stop, wait for a port.

A pid file holds the pid and the process's start time (from ``/proc``), so a pid that the
kernel has since given to another process is never mistaken for the service.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from infra.errors import START_MARKER, ServiceError

# Popen objects of the services this process started: kept so that they are not reported
# as leaked while still running; their exit status is collected by ``pid_alive``.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (index 0 is the state)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if it does not exist."""
    fields = _proc_stat(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def _reap(pid: int) -> None:
    """Collect the exit status of ``pid`` if it is an exited child of this process."""
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is not None:
            del _CHILDREN[pid]
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as dead)."""
    if pid <= 0:
        return False
    _reap(pid)
    fields = _proc_stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def write_pid_file(pid_path: Path, pid: int) -> None:
    pid_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = pid_path.with_name(pid_path.name + ".tmp")
    tmp.write_text(f"{pid} {start_time(pid) or ''}\n")
    tmp.replace(pid_path)


def read_pid(pid_path: Path) -> int | None:
    """The pid recorded in ``pid_path`` if that very process is still running, else None."""
    try:
        parts = pid_path.read_text().split()
    except OSError:
        return None
    if not parts or not parts[0].isdigit():
        return None
    pid = int(parts[0])
    if not pid_alive(pid):
        return None
    if len(parts) > 1 and parts[1] != start_time(pid):
        return None  # the pid was reused by another process
    return pid


def is_running(pid_path: Path) -> bool:
    """Whether the process recorded in ``pid_path`` is running."""
    return read_pid(pid_path) is not None


def start_detached(
    argv: Sequence[str],
    *,
    log_path: Path,
    pid_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Start ``argv`` in its own session, stdout and stderr appended to ``log_path``; return its pid.

    The process outlives this one; its pid (and start time) go to ``pid_path``.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        log.write(f"{START_MARKER}{stamp} agentlog starts: {' '.join(argv)}\n".encode())
        log.flush()
        child = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    _CHILDREN[child.pid] = child
    write_pid_file(pid_path, child.pid)
    return child.pid


def raise_open_files(pid: int, wanted: int) -> int:
    """Raise ``pid``'s open-file limit to ``wanted`` (soft and hard) where this process may, else
    its soft limit to its hard one; return the soft limit it has now."""
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return soft
    try:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (wanted, max(wanted, hard)))
    except (PermissionError, ValueError):  # raising the hard limit needs CAP_SYS_RESOURCE
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (hard, hard))
    return int(resource.prlimit(pid, resource.RLIMIT_NOFILE)[0])


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``pid`` to exit; True if it did."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def stop_pid(pid: int, *, sig: signal.Signals = signal.SIGTERM, timeout: float = 30.0) -> bool:
    """Send ``sig`` to ``pid``, wait up to ``timeout`` s, then SIGKILL it and its process group.

    Returns whether the process was running. Raises OSError only if it cannot be killed at all.
    """
    if not pid_alive(pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    if not wait_gone(pid, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not wait_gone(pid, 10.0):
            raise OSError(f"process {pid} did not exit after SIGKILL")
    # Anything the service left in its own session (start_new_session made pgid == pid).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    return True


def stop_pid_file(
    pid_path: Path, *, sig: signal.Signals = signal.SIGTERM, timeout: float = 30.0
) -> int | None:
    """Stop the process recorded in ``pid_path`` and remove the file; return its pid if it ran."""
    pid = read_pid(pid_path)
    stopped = pid if pid is not None and stop_pid(pid, sig=sig, timeout=timeout) else None
    pid_path.unlink(missing_ok=True)
    return stopped


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until(
    service: str,
    ready: Callable[[], bool],
    *,
    what: str,
    timeout: float,
    log_path: Path | None = None,
    pid: int | None = None,
    interval: float = 0.2,
) -> None:
    """Poll ``ready`` until it returns True; raise ServiceError if ``pid`` exits or time runs out.

    ``what`` says what is awaited (e.g. "port 9092 to open"); it goes into the error message.
    """
    deadline = time.monotonic() + timeout
    while True:
        if ready():
            return
        if pid is not None and not pid_alive(pid):
            raise ServiceError(service, f"the process (pid {pid}) exited while waiting for {what}", log_path)
        if time.monotonic() >= deadline:
            raise ServiceError(service, f"timed out after {timeout:.0f} s waiting for {what}", log_path)
        time.sleep(interval)


def wait_for_port(
    service: str,
    host: str,
    port: int,
    timeout: float,
    *,
    log_path: Path | None = None,
    pid: int | None = None,
) -> None:
    """Wait until ``host:port`` accepts connections; the error names the service, reason and log."""
    wait_until(
        service,
        lambda: port_open(host, port),
        what=f"{host}:{port} to accept connections",
        timeout=timeout,
        log_path=log_path,
        pid=pid,
    )


def ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def port_bindable(host: str, port: int) -> bool:
    """Whether a server could listen on ``host:port`` now (no listener, no connection using it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is fine
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def ensure_port_free(service: str, host: str, port: int, log_path: Path | None = None) -> None:
    """Raise ServiceError if ``host:port`` is taken by another process (a listener or a connection)."""
    if port_open(host, port):
        raise ServiceError(
            service,
            f"port {port} on {host} is already in use by another process (not one started from this "
            "state folder); stop it or choose another port",
            log_path,
        )
    deadline = time.monotonic() + 5.0
    while not port_bindable(host, port):
        if time.monotonic() >= deadline:
            low, high = ephemeral_range()
            hint = (
                f"; it is in the kernel's ephemeral range ({low}-{high}), where outgoing connections take "
                f"their local ports: choose a port below {low}"
                if low <= port <= high
                else ""
            )
            raise ServiceError(service, f"port {port} on {host} cannot be bound (in use){hint}", log_path)
        time.sleep(0.2)
