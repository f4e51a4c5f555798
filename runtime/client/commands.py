"""The commands a client writes -- submissions, signals, cancellations -- and the producers they go through."""

from __future__ import annotations

import atexit
import base64
import secrets
import time
from collections.abc import Callable, Iterable

from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.port.protocol import EventLog
from runtime.log.records.events import Command, RunSubmitted
from runtime.log.schemas.datum import record_to_dict
from runtime.log.schemas.serde import Serde
from runtime.log.sealing.submitter import SubmitterKeys


def new_run_id() -> str:
    """20 lowercase base32 characters: 100 random bits (more than 24 hex characters carried) in
    fewer bytes -- the id is the Kafka key of every record of the run."""
    return base64.b32encode(secrets.token_bytes(15)).decode("ascii")[:20].lower()


class CommandWriter:
    """Appends a client's commands to the commands topic, each sealed under the key its run needs.

    Submissions are written at least once: the worker starts a run id once and ignores a repeated
    submission (DESIGN.md; runtime.worker.continuation), so they need no idempotent producer --
    whose ProducerId request holds a fresh process's first record ~500 ms (librdkafka retries it
    on a 500 ms timer once the bootstrap connection is replaced). Signals keep ``log``'s
    idempotent producer: the worker delivers a repeated SignalSent twice. Cancellations too (one
    producer for what must not repeat)."""

    def __init__(
        self,
        settings: Settings,
        identity: str,
        serde: Serde,
        log: EventLog,
        submissions: EventLog,
        *,
        keys: SubmitterKeys | None,
        closes_log: bool,
        at_exit: Callable[[], None],
    ) -> None:
        self.settings, self.identity, self.serde = settings, identity, serde
        self.log, self._submissions = log, submissions
        self._keys = keys
        self._closes_log = closes_log
        self._at_exit = at_exit  # the client's close: registered at the first write to a log it opened
        self._wrote = False

    def choose_key(self, run_id: str, *, drawn: bool, subject: str | None) -> None:
        """Say which key ``run_id``'s submission is sealed under (``SubmitterKeys.for_submission``)."""
        if self._keys is not None:
            self._keys.for_submission(run_id, drawn=drawn, subject=subject)
        elif subject is not None:
            raise ValueError("submit(subject=...) needs a deployment that seals contents (seal_contents)")

    def learn_key_of(self, run_id: str, reads: Iterable[Callable[[], object]]) -> None:
        """Before a signal for ``run_id``: make sure the key its contents are sealed under is known
        (``SubmitterKeys.learn_key_of``, trying ``reads`` in turn); AgentlogError if none told it."""
        if self._keys is not None and not self._keys.learn_key_of(run_id, reads):
            raise AgentlogError(
                f"run {run_id}: no submission of it in {self.settings.commands_topic!r}, so the key its "
                "contents are sealed under is not known, and a signal is sealed under that key: submit "
                "the run first"
            )

    def send(self, command: Command) -> None:
        """Append ``command``: a submission through the submissions' producer, a signal or
        cancellation through the idempotent one once the submissions sent before it are
        acknowledged -- so a run's signal never lands ahead of its submission."""
        via = self._submissions if isinstance(command, RunSubmitted) else self.log
        stamped = type(command)(
            **{**record_to_dict(command), "occurred_at": int(time.time() * 1000), "worker": self.identity}
        )
        if not self._wrote and self._closes_log:
            atexit.register(self._at_exit)  # records still queued at exit are sent, not dropped
        if via is not self._submissions and self._wrote:
            self._submissions.flush()
        self._wrote = True
        via.append(self.settings.commands_topic, None, command.run_id.encode(), self.serde.encode(stamped))

    def flush(self) -> None:
        """Wait until every command sent so far is acknowledged by the log."""
        if self._wrote:
            self._submissions.flush()
            if self.log is not self._submissions:
                self.log.flush()
            if self._keys is not None:
                self._keys.settle()  # the submissions' keys (raises if one was not written)

    def close(self) -> None:
        """Stop following keys, flush and close the logs this client opened (not one it was given)."""
        if self._keys is not None:
            self._keys.close()
        if self._closes_log:
            try:
                self._submissions.close()
            finally:
                self.log.close()
