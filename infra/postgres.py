"""A private PostgreSQL 15 cluster: the schema registry's storage.

It listens on 127.0.0.1:<postgres_port> only, with its socket in its own folder. PostgreSQL
refuses to run as root, so as root ``initdb`` and ``pg_ctl`` run as the ``postgres`` OS user
(``runuser -u postgres --``). That user must be able to reach the data: if it cannot traverse
the state folder (or the socket path would be too long), the cluster lives in
``/var/tmp/agentlog-pg-<hash of the state folder>`` and ``<state_dir>/postgres`` links there.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import secrets
import shlex
import shutil
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from infra import process
from infra.errors import ServiceError
from infra.paths import cache_root, state_dir
from runtime.config import Settings

SERVICE = "postgresql"
MAJOR = 15
PG_BIN = Path(f"/usr/lib/postgresql/{MAJOR}/bin")
OS_USER = "postgres"
HOST = "127.0.0.1"
DATABASE = "registry"
ROLE = "registry"
FALLBACK_ROOT = Path("/var/tmp")
START_TIMEOUT = 60
STOP_TIMEOUT = 60.0
_MAX_SOCKET_PATH = 100  # sun_path holds 107 bytes


def _is_root() -> bool:
    return os.geteuid() == 0


def _as_pg(argv: Sequence[str]) -> list[str]:
    """``argv`` run as the postgres OS user when we are root, else as ourselves."""
    return ["runuser", "-u", OS_USER, "--", *argv] if _is_root() else list(argv)


def ensure_installed(progress: Callable[[str], None]) -> None:
    """Install Debian's postgresql-15 with apt-get unless its binaries are present."""
    if (PG_BIN / "postgres").is_file() and (PG_BIN / "initdb").is_file():
        return
    if not _is_root() or shutil.which("apt-get") is None:
        raise ServiceError(
            SERVICE,
            f"PostgreSQL {MAJOR} is not installed ({PG_BIN} is missing); "
            f"install it: apt-get install -y postgresql-{MAJOR}",
        )
    progress(f"installing PostgreSQL {MAJOR} with apt-get")
    log = cache_root() / "apt-postgresql.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with log.open("wb") as out:
        for argv in (["apt-get", "update"], ["apt-get", "install", "-y", f"postgresql-{MAJOR}"]):
            done = subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, check=False
            )
            if done.returncode != 0:
                raise ServiceError(SERVICE, f"{' '.join(argv)} failed (exit {done.returncode})", log)
    if not (PG_BIN / "postgres").is_file():
        raise ServiceError(
            SERVICE, f"apt-get installed postgresql-{MAJOR} but {PG_BIN}/postgres is missing", log
        )


def link_path(settings: Settings) -> Path:
    """``<state_dir>/postgres``: the cluster's folder, or a link to it."""
    return state_dir(settings) / "postgres"


def fallback_dir(settings: Settings) -> Path:
    """Where the cluster lives when the postgres user cannot reach the state folder."""
    digest = hashlib.sha256(str(state_dir(settings)).encode()).hexdigest()[:12]
    return FALLBACK_ROOT / f"agentlog-pg-{digest}"


def _pg_can_traverse(path: Path) -> bool:
    if not _is_root():
        return True
    done = subprocess.run(
        _as_pg(["test", "-x", str(path)]), stdin=subprocess.DEVNULL, capture_output=True, check=False
    )
    return done.returncode == 0


def _socket_fits(home: Path, settings: Settings) -> bool:
    return len(str(home / "run" / f".s.PGSQL.{settings.postgres_port}")) <= _MAX_SOCKET_PATH


def _chown_to_pg(path: Path) -> None:
    if _is_root():
        entry = pwd.getpwnam(OS_USER)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def home_dir(settings: Settings, *, create: bool = False) -> Path:
    """The cluster's folder (data, socket, log); with ``create``, make it where postgres can reach it."""
    link = link_path(settings)
    if link.is_symlink() or link.is_dir():
        home = link.resolve()
        if create and not home.is_dir():
            # The cluster under /var/tmp was cleaned away. A new one would hand out schema ids from 1
            # again, and records already in Kafka name the old ids: refuse rather than corrupt.
            raise ServiceError(
                SERVICE,
                f"{link} links to {home}, which no longer exists: the registry's schemas are gone. "
                f"Remove {link} to start a new, empty cluster (schema ids start over), "
                "or use a new state folder",
            )
        return home
    if not create:
        return link
    link.parent.mkdir(parents=True, exist_ok=True)
    if _pg_can_traverse(link.parent) and _socket_fits(link, settings):
        link.mkdir(mode=0o755)
        _chown_to_pg(link)
        return link
    home = fallback_dir(settings)
    home.mkdir(parents=True, exist_ok=True, mode=0o755)
    _chown_to_pg(home)
    link.symlink_to(home, target_is_directory=True)
    return home


def data_dir(settings: Settings) -> Path:
    return home_dir(settings) / "data"


def socket_dir(settings: Settings) -> Path:
    return home_dir(settings) / "run"


def log_path(settings: Settings) -> Path:
    return home_dir(settings) / "postgres.log"


def address(settings: Settings) -> str:
    return f"{HOST}:{settings.postgres_port}"


def password(settings: Settings) -> str:
    """The registry role's password: made once, kept (mode 0600) in the state folder."""
    path = state_dir(settings) / "registry" / "pg-password"
    if path.is_file():
        secret = path.read_text().strip()
        if secret:
            return secret
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_hex(16)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secret + "\n")
    return secret


def running_pid(settings: Settings) -> int | None:
    """The postmaster's pid (from ``postmaster.pid``) if it is running."""
    try:
        first = (data_dir(settings) / "postmaster.pid").read_text().split("\n", 1)[0].strip()
    except OSError:
        return None
    if not first.isdigit():
        return None
    pid = int(first)
    if not process.pid_alive(pid):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if b"postgres" in cmdline else None


def _run_logged(
    argv: Sequence[str], what: str, settings: Settings, *, stdin: str | None = None, timeout: float = 120.0
) -> None:
    try:
        done = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, timeout=timeout, check=False, cwd="/"
        )
    except subprocess.TimeoutExpired as exc:
        raise ServiceError(SERVICE, f"{what} timed out after {timeout:.0f} s", log_path(settings)) from exc
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()
        raise ServiceError(
            SERVICE, f"{what} failed (exit {done.returncode}): {output[-2000:]}", log_path(settings)
        )


def _initdb(settings: Settings, progress: Callable[[str], None]) -> None:
    if (data_dir(settings) / "PG_VERSION").is_file():
        return
    progress(f"initialising a PostgreSQL {MAJOR} cluster in {data_dir(settings)}")
    argv = [
        str(PG_BIN / "initdb"),
        "-D",
        str(data_dir(settings)),
        "-U",
        OS_USER,
        "-E",
        "UTF8",
        "--locale=C",
        "--auth-local=peer",
        "--auth-host=scram-sha-256",
    ]
    _run_logged(_as_pg(argv), "initdb", settings)


def ensure_database(settings: Settings) -> None:
    """Create (or update) the ``registry`` role with its password, and the ``registry`` database."""
    secret = password(settings)
    sql = f"""
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ROLE}') THEN
    CREATE ROLE {ROLE} LOGIN PASSWORD '{secret}';
  ELSE
    ALTER ROLE {ROLE} WITH LOGIN PASSWORD '{secret}';
  END IF;
END $$;
SELECT 'CREATE DATABASE {DATABASE} OWNER {ROLE}'
  WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '{DATABASE}')\\gexec
"""
    argv = [
        str(PG_BIN / "psql"),
        "-X",
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "-h",
        str(socket_dir(settings)),
        "-p",
        str(settings.postgres_port),
        "-U",
        OS_USER,
        "-d",
        "postgres",
    ]
    _run_logged(_as_pg(argv), "creating the registry role and database", settings, stdin=sql)


def start(settings: Settings, progress: Callable[[str], None]) -> int:
    """Start the cluster unless it is running (initdb the first time); return the postmaster's pid."""
    ensure_installed(progress)
    home_dir(settings, create=True)
    pid = running_pid(settings)
    if pid is None:
        process.ensure_port_free(SERVICE, HOST, settings.postgres_port, log_path(settings))
        _initdb(settings, progress)
        run = socket_dir(settings)
        run.mkdir(exist_ok=True)
        _chown_to_pg(run)
        log = log_path(settings)
        if not log.exists():
            log.touch()
            _chown_to_pg(log)
        options = (
            f"-c listen_addresses={HOST} -c port={settings.postgres_port} "
            f"-c unix_socket_directories={shlex.quote(str(run))}"
        )
        progress(f"starting PostgreSQL on {address(settings)}")
        argv = [
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(data_dir(settings)),
            "-l",
            str(log),
            "-w",
            "-t",
            str(START_TIMEOUT),
            "-o",
            options,
            "start",
        ]
        _run_logged(_as_pg(argv), "pg_ctl start", settings, timeout=START_TIMEOUT + 30)
        pid = running_pid(settings)
        if pid is None:
            raise ServiceError(SERVICE, "pg_ctl reported a start but no postmaster is running", log)
    process.wait_for_port(
        SERVICE, HOST, settings.postgres_port, START_TIMEOUT, log_path=log_path(settings), pid=pid
    )
    ensure_database(settings)
    return pid


def stop(settings: Settings) -> int | None:
    """Stop the cluster (SIGINT: fast shutdown) and wait; return the postmaster's pid if it ran."""
    pid = running_pid(settings)
    if pid is None:
        return None
    try:
        process.stop_pid(pid, sig=signal.SIGINT, timeout=STOP_TIMEOUT)
    except OSError as exc:
        raise ServiceError(SERVICE, f"could not stop: {exc}", log_path(settings)) from exc
    return pid
