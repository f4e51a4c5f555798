"""OpenTelemetry spans: one per run (per worker that carries it) and one per model or tool call attempt.

Only ``opentelemetry-api`` is imported, and only once something in the process has imported it (a
TracerProvider cannot be set otherwise): a worker that does not trace starts without it. With no
SDK configured every span is a no-op. A deployment that exports installs the ``otel`` extra and
sets a TracerProvider in the worker's process.

A run outlives any worker, so its spans cannot hang off one long-lived span. Instead the trace
is the run's: its id is derived from the run id (:func:`trace_id_for`) and recorded in
``RunStarted.trace_id``, so the audit store's rows join the traces. Every span of the run has a
virtual root in that trace (a span id derived from the run id too, never exported), and a worker
that carries the run -- from its start, or resumed after a rebuild -- opens an ``invoke_agent``
span under it, ended when the run ends there; each call attempt is a child of that span.

Names and attributes follow the OpenTelemetry GenAI semantic conventions: ``chat {model}`` with
``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.response.model`` and
``gen_ai.usage.input_tokens`` / ``output_tokens``; ``execute_tool {tool}`` with
``gen_ai.tool.name``; ``invoke_agent {workflow}`` with ``gen_ai.agent.name``. Arguments, prompts
and results are not put on spans: the log has them (redacted), a trace backend need not.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import sys
from typing import TYPE_CHECKING

from runtime.log.records.events import ModelCallCompleted, ToolCallCompleted

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

    from runtime.workflow.activation import RunView
    from runtime.workflow.intents import Intent


def _off() -> Span:
    """What every span is while no TracerProvider is configured."""
    from opentelemetry import trace

    return trace.INVALID_SPAN


@functools.cache
def _tracer() -> Tracer:
    """agentlog's tracer, asked for once a provider is set (RunSpans.on): the provider's own."""
    from opentelemetry import trace

    return trace.get_tracer("agentlog")


def _provider_set() -> bool:
    # Setting a provider imports opentelemetry.trace; until something has, none is set, and asking
    # is not worth the API's import at every worker's start. OTEL_PYTHON_TRACER_PROVIDER names one
    # the API itself would load when first asked.
    if "opentelemetry.trace" not in sys.modules and "OTEL_PYTHON_TRACER_PROVIDER" not in os.environ:
        return False
    from opentelemetry import trace

    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _derived(kind: str, run_id: str, hex_digits: int) -> int:
    value = int(hashlib.sha256(f"agentlog/{kind}/{run_id}".encode()).hexdigest()[:hex_digits], 16)
    return value or 1  # 0 is the invalid id


def trace_id_for(run_id: str) -> str:
    """The run's trace id, 32 hex digits: the same on every worker, for every span of the run."""
    return f"{_derived('trace', run_id, 32):032x}"


def _run_root(run_id: str) -> Context:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    root = SpanContext(
        trace_id=_derived("trace", run_id, 32),
        span_id=_derived("span", run_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(root))


class RunSpans:
    """The open ``invoke_agent`` span of each run this worker carries."""

    def __init__(self) -> None:
        self._runs: dict[str, Span] = {}
        # Whether a TracerProvider has been set. Until then the worker makes no span call at all
        # (it reads this attribute): even a no-op span touches the context API, whose first use
        # scans every installed package's entry points (hundreds of milliseconds, paid by the
        # first step after a worker starts), and a per-step check is per-step work for nothing.
        # ``watch`` asks the API now and then once a second until a provider appears; once set, it stays.
        self.on = _provider_set()

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Notice a TracerProvider set after the worker started (within a second)."""
        if not self.on:
            self.on = _provider_set()
            if not self.on:
                loop.call_later(1.0, self.watch, loop)

    def run_span(self, run: RunView, worker: str) -> Span:
        span = self._runs.get(run.run_id)
        if span is None:
            if not self.on:
                return _off()
            from opentelemetry.trace import SpanKind

            span = self._runs[run.run_id] = _tracer().start_span(
                f"invoke_agent {run.workflow}",
                context=_run_root(run.run_id),
                kind=SpanKind.INTERNAL,
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": run.workflow,
                    "agentlog.run_id": run.run_id,
                    "agentlog.worker": worker,
                },
            )
        return span

    def run_ended(self, run_id: str, status: str) -> None:
        span = self._runs.pop(run_id, None)
        if span is not None:
            if span.is_recording():
                span.set_attribute("agentlog.status", status)
                if status in ("failed", "parked"):
                    from opentelemetry.trace import Status, StatusCode

                    span.set_status(Status(StatusCode.ERROR, status))
            span.end()

    def call_started(self, run: RunView, worker: str, intent: Intent, attempt: int) -> Span:
        if not self.on:
            return _off()
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind

        parent = trace.set_span_in_context(self.run_span(run, worker))
        if intent.kind == "model":
            name, attributes = (
                f"chat {intent.name}",
                {"gen_ai.operation.name": "chat", "gen_ai.request.model": intent.name},
            )
        else:
            name, attributes = (
                f"execute_tool {intent.name}",
                {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": intent.name},
            )
        span = _tracer().start_span(name, context=parent, kind=SpanKind.CLIENT, attributes=attributes)
        if span.is_recording():
            span.set_attribute("agentlog.run_id", run.run_id)
            span.set_attribute("agentlog.position", intent.position)
            span.set_attribute("agentlog.attempt", attempt)
            span.set_attribute("agentlog.in_doubt", intent.in_doubt)
            if intent.key is not None:
                span.set_attribute("agentlog.idempotency_key", intent.key)
        return span

    @staticmethod
    def call_completed(span: Span, outcome: ModelCallCompleted | ToolCallCompleted) -> None:
        if span.is_recording() and isinstance(outcome, ModelCallCompleted):
            for attribute, value in (
                ("gen_ai.response.model", outcome.response_model),
                ("gen_ai.usage.input_tokens", outcome.input_tokens),
                ("gen_ai.usage.output_tokens", outcome.output_tokens),
                ("gen_ai.usage.cached_tokens", outcome.cached_tokens),
            ):
                if value is not None:
                    span.set_attribute(attribute, value)
        span.end()

    @staticmethod
    def call_failed(span: Span, error: BaseException) -> None:
        if span.is_recording():
            from opentelemetry.trace import Status, StatusCode

            span.set_attribute("error.type", type(error).__name__)
            span.set_status(Status(StatusCode.ERROR, str(error)[:200]))
        span.end()
