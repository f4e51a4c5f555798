"""What the worker may run out of -- descriptors, threads, memory -- watched, and named when it does.

A worker short of descriptors cannot open a socket for a call or a Kafka connection; short of
threads it cannot start a call's thread; short of memory the kernel kills it. Each of these, met
unwatched, showed as a hang: calls failing in threads nobody waits on, a health server spinning
on a failing ``accept``. So:

- ``ResourceWatch`` samples the process every second (``/proc/self``: a stat of its descriptors'
  directory and one status file, ~0.1 ms): open descriptors against ``RLIMIT_NOFILE``, threads against the lowest of
  ``resource_max_threads``, the cgroup's ``pids.max`` and ``RLIMIT_NPROC``, resident memory against
  the lower of ``resource_max_memory_bytes`` and the cgroup's memory limit, address space against
  ``RLIMIT_AS``. Past ``resource_high_water`` of a limit the worker is not ready (``/readyz`` says
  ``descriptors: 235 of 256 in use``) and one log line says so; back under ``resource_low_water``
  it is ready again (two marks, so a count that hovers at one does not flap).
- The event loop turns every 10 ms; one that has not turned for ``LOOP_STALL_S`` is held by
  something that does not yield (a sync call in the loop, a wait without a timeout): the worker is
  not ready (``event loop: no turn for 42 s``) and one line says so, until it turns again.
- ``lacking(error)`` names the resource an error says ran out (EMFILE, ENFILE, ENOMEM, ENOBUFS,
  MemoryError, a thread that could not start); ``out_of`` logs the one line the worker stops on.
  Where the worker cannot go on without it, it stops (exit 1): its supervisor restarts it, or
  another member of the group takes its partitions. ``ResourceWatch.fatal`` is that stop for
  threads other than the loop's: if the loop has not stopped ``FATAL_GRACE_S`` later (it may be the
  thing that hangs), the process exits on its own. Nothing durable is lost by that exit: the log
  holds every acknowledged record, and what was not acknowledged is done again by the successor.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import resource
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.worker.health import Readiness

log = logging.getLogger("agentlog.worker")

INTERVAL_S = 1.0
FATAL_GRACE_S = 10.0  # the loop stops on a fatal lack within this, or the process exits itself
LOOP_STALL_S = 30.0  # a replay of many runs holds the loop for seconds; this is no longer a replay
FATAL_EXIT_CODE = 70  # EX_SOFTWARE: what a supervisor sees when the watch, not the loop, ended it

_OUT_OF_ERRNO = {
    errno.EMFILE: "descriptors",  # this process's RLIMIT_NOFILE
    errno.ENFILE: "descriptors",  # the system's table
    errno.ENOMEM: "memory",
    errno.ENOBUFS: "memory",  # socket buffers
}


@dataclass(frozen=True)
class Usage:
    """One resource's use and limit (None: no limit applies, so none is watched)."""

    resource: str
    used: int
    limit: int | None

    def describe(self) -> str:
        if self.resource in ("memory", "address space"):
            return f"{self.resource}: {_mib(self.used)} of {_mib(self.limit or 0)} in use"
        return f"{self.resource}: {self.used} of {self.limit} in use"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


@dataclass(frozen=True)
class Watermarks:
    """Short of a resource at ``high`` of its limit; no longer short under ``low`` of it."""

    high: float = 0.9
    low: float = 0.8

    def short(self, usages: Iterable[Usage], were_short: frozenset[str]) -> frozenset[str]:
        """The resources short now, given those short at the last sample."""
        now = set()
        for usage in usages:
            if usage.limit is None or usage.limit <= 0:
                continue
            mark = self.low if usage.resource in were_short else self.high
            if usage.used >= mark * usage.limit:
                now.add(usage.resource)
        return frozenset(now)


def lacking(error: BaseException, *, by_text: bool = False) -> str | None:
    """The resource ``error`` says the process ran out of, or None if it says no such thing.
    ``by_text``: also an error whose message holds the system's words for it (librdkafka's, when a
    Kafka client cannot be created, carry no errno) -- only where the error is the worker's own, not
    a call's (a service's message may quote its own lack)."""
    if isinstance(error, MemoryError):
        return "memory"
    if isinstance(error, OSError) and error.errno in _OUT_OF_ERRNO:
        return _OUT_OF_ERRNO[error.errno]
    if isinstance(error, RuntimeError) and "can't start new thread" in str(error):
        return "threads"
    if by_text:
        text = str(error)
        return next((name for code, name in _OUT_OF_ERRNO.items() if os.strerror(code) in text), None)
    return None


def out_of(resource_name: str, where: str, error: BaseException) -> str:
    """Log the one line a worker stops on, and return it as the reason it stops with."""
    why = f"out of {resource_name}: {where} failed ({type(error).__name__}: {error})"
    log.error(
        json.dumps(
            {
                "event": "worker_out_of_resource",
                "resource": resource_name,
                "where": where,
                "error": f"{type(error).__name__}: {error}",
                "pid": os.getpid(),
            }
        )
    )
    return why


def note_lacking(where: str, error: BaseException) -> None:
    """The one line, if ``error`` (which the worker stops on) says a resource ran out -- and is not
    the worker's own error, whose raiser said it already (``out_of``)."""
    if isinstance(error, AgentlogError):
        return
    resource_name = lacking(error, by_text=True)
    if resource_name is not None:
        out_of(resource_name, where, error)


def wake_failure(run_id: str, error: BaseException) -> str:
    """Why a run could not be woken (``activate`` raised, its workflow code or the worker's lack of
    a resource): the reason it is parked with, so that the partition's other runs go on rather than
    a restarted worker failing on the same run again. The line is logged for a lack."""
    short_of = lacking(error)
    if short_of is None:
        return f"waking it raised {type(error).__name__}: {error}; fix the code, then reset the run"
    out_of(short_of, f"waking run {run_id}", error)
    return (
        f"out of {short_of} when waking it ({type(error).__name__}: {error}); reset the run once the "
        "worker has them"
    )


# ---------------------------------------------------------------------------------------- sampling
def _limit(*candidates: int | None) -> int | None:
    finite = [c for c in candidates if c is not None and c > 0]
    return min(finite) if finite else None


def _rlimit(which: int) -> int | None:
    soft = resource.getrlimit(which)[0]
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _cgroup_file(controller: str, v2_name: str, v1_name: str) -> int | None:
    """A number from this process's cgroup (v2 unified, else v1 ``controller``); None if unlimited
    or unreadable. A container usually sees its own cgroup as the root of the mount."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates: list[Path] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            root = Path("/sys/fs/cgroup")
            candidates += [root / path.lstrip("/") / v2_name, root / v2_name]
        elif controller in controllers.split(","):
            root = Path("/sys/fs/cgroup") / controller
            candidates += [root / path.lstrip("/") / v1_name, root / v1_name]
    for candidate in candidates:
        try:
            text = candidate.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        value = int(text)
        return None if value >= 1 << 62 else value  # v1 writes "unlimited" as a near-2**63 number
    return None


@dataclass(frozen=True)
class Limits:
    """What the worker's resources are measured against, read once at start (rlimits again at each
    sample: cheap, and a process may lower its own)."""

    max_descriptors: int | None
    max_threads: int | None
    max_memory: int | None

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(
            max_descriptors=settings.resource_max_descriptors,
            max_threads=_limit(settings.resource_max_threads, _cgroup_file("pids", "pids.max", "pids.max")),
            max_memory=_limit(
                settings.resource_max_memory_bytes,
                _cgroup_file("memory", "memory.max", "memory.limit_in_bytes"),
            ),
        )


def sample(limits: Limits) -> list[Usage]:
    """This process's use of each resource now (Linux ``/proc``; elsewhere none is watched)."""
    nofile = _limit(limits.max_descriptors, _rlimit(resource.RLIMIT_NOFILE))
    try:
        # Linux 6.2+ gives the count as the directory's size (a stat: no descriptor, no listing);
        # older kernels say 0, and the listing counts them (~1 ms per 1,000 open).
        descriptors = os.stat("/proc/self/fd").st_size or len(os.listdir("/proc/self/fd")) - 1
    except OSError as error:
        if error.errno not in (errno.EMFILE, errno.ENFILE):
            return []  # no /proc here
        descriptors = nofile or 0  # not one descriptor left to count them with
    usages = [Usage("descriptors", descriptors, nofile)]
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return usages
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    threads = int(fields.get("Threads", "0").strip() or 0)
    rss = int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
    size = int(fields.get("VmSize", "0 kB").split()[0]) * 1024
    usages.append(Usage("threads", threads, _limit(limits.max_threads, _rlimit(resource.RLIMIT_NPROC))))
    usages.append(Usage("memory", rss, limits.max_memory))
    address_space = _rlimit(resource.RLIMIT_AS)
    if address_space is not None:
        usages.append(Usage("address space", size, address_space))
    return usages


class ResourceWatch:
    """Samples the process every ``interval`` s in a daemon thread of its own; sets
    ``readiness.short_of`` (``/readyz``), ``usages`` (metrics) and, once a lack is fatal,
    ``failure`` (the loop stops on it)."""

    def __init__(
        self,
        settings: Settings,
        readiness: Readiness,
        interval: float = INTERVAL_S,
        probe: Callable[[Limits], list[Usage]] = sample,
    ) -> None:
        self.limits = Limits.of(settings)
        self.marks = Watermarks(settings.resource_high_water, settings.resource_low_water)
        self.readiness = readiness
        self._sample_failing = False
        self.interval = interval
        self.probe = probe
        self.usages: list[Usage] = []
        self.failure: str | None = None
        self.loop_turned: float | None = None  # time.monotonic() at the loop's last turn (it writes it)
        self._loop_stalled = False
        self._fatal_at: float | None = None
        self._short: frozenset[str] = frozenset()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agentlog-resources", daemon=True)

    def start(self) -> ResourceWatch:
        self.check()  # a worker started short is not ready from its first answer
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def fatal(self, where: str, error: BaseException) -> None:
        """A lack the worker cannot go on with, met outside the loop (the health server's accept):
        the loop stops on ``failure``; if it has not within ``FATAL_GRACE_S``, the process exits."""
        if self.failure is not None:
            return
        self.failure = out_of(lacking(error) or "a resource", where, error)
        self._fatal_at = time.monotonic()

    def check(self) -> None:
        """One sample: readiness and the log line when a resource crosses a mark."""
        usages = self.probe(self.limits)
        self.usages = usages
        short = self.marks.short(usages, self._short)
        by_name = {u.resource: u for u in usages}
        for name in sorted(short - self._short):
            _say("resource_short", by_name[name], self.marks.high)
        for name in sorted(self._short - short):
            if name in by_name:
                _say("resource_recovered", by_name[name], self.marks.low)
        self._short = short
        reasons = [by_name[n].describe() for n in sorted(short)]
        stalled = self._stall()
        if stalled is not None:
            reasons.append(stalled)
        self.readiness.short_of = "; ".join(reasons) or None

    def _stall(self) -> str | None:
        """Why the loop counts as stalled, or None; one line when it stalls and one when it turns again."""
        turned = self.loop_turned
        idle = 0.0 if turned is None else time.monotonic() - turned
        if idle < LOOP_STALL_S:
            if self._loop_stalled:
                log.warning(json.dumps({"event": "loop_turning_again"}))
            self._loop_stalled = False
            return None
        if not self._loop_stalled:
            log.warning(json.dumps({"event": "loop_stalled", "seconds": round(idle, 1)}))
        self._loop_stalled = True
        return f"event loop: no turn for {idle:.0f} s"

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check()
                self._sample_failing = False
            except Exception as error:  # the last verdict stands; said once per outage, not per try
                if not self._sample_failing:
                    log.warning(json.dumps({"event": "resource_sample_failed", "why": str(error)}))
                self._sample_failing = True
            if self._fatal_at is not None and time.monotonic() - self._fatal_at > FATAL_GRACE_S:
                log.error(
                    json.dumps(
                        {
                            "event": "worker_exiting",
                            "why": self.failure,
                            "how": f"the loop did not stop within {FATAL_GRACE_S:g} s",
                        }
                    )
                )
                os._exit(FATAL_EXIT_CODE)


def _say(event: str, usage: Usage, mark: float) -> None:
    log.warning(
        json.dumps(
            {
                "event": event,
                "resource": usage.resource,
                "used": usage.used,
                "limit": usage.limit,
                "mark": mark,
                "why": usage.describe(),
            }
        )
    )
