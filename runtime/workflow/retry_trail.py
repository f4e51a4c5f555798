"""What a call's failure records leave for its next attempt: not before when, how many attempts were
rate limits, since when it has been tried. Read the same way live and on replay, so a worker that
takes a run over after a restart knows the wait its predecessor recorded (``retry_at``) and does not
re-send the call early (runtime.worker.retrying decides; runtime.worker.execution waits)."""

from __future__ import annotations

from runtime.log.records.events import ModelCallFailed, ToolCallFailed
from runtime.workflow.intents import Intent


def note_failure(command: Intent, event: ModelCallFailed | ToolCallFailed) -> None:
    """Fold one failure record of ``command`` into its retry trail (records in log order)."""
    if command.first_attempt_at == 0 and event.occurred_at > 0:
        # The attempt started its latency before the record was written.
        command.first_attempt_at = event.occurred_at - event.latency_us // 1000
    command.not_before = event.retry_at  # the latest record's: an attempt came after any earlier one
    if event.retry_at > 0:  # only a rate limit records a wait (its retry_at), and it spent no attempt
        command.rate_limited_attempts += 1
