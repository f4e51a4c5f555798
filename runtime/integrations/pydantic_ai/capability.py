"""``AgentlogDurability``: the PydanticAI durability capability whose durable container is an
agentlog workflow and whose durable units are agentlog model and tool calls.

Built on ``pydantic_ai.durable_exec`` as its maintainers' guide asks (``durable_exec/AGENTS.md``):
a ``BaseDurabilityCapability`` declaring the engine once (``DurabilityEngineSpec``: JSON journal,
an MCP toolset connected inside each call that uses it), and a
``CallableOperationBackend`` that turns each unit into a recorded call:

- a model request (streamed or not) -> ``ctx.model("<agent>.model", ...)``: the messages (request
  timestamps left out, see ``units.recorded_messages``), settings and request parameters are its
  prompt; the ``ModelResponse`` with its usage is its result;
- a tool call -> ``ctx.tool("<agent>.<tool>", **args)`` (``"<agent>.<toolset id>.<tool>"`` for MCP
  and dynamic toolsets): an effect when the tool is named in ``effects``; ``ModelRetry``,
  ``CallDeferred`` and ``ApprovalRequired`` are recorded as the call's value (PydanticAI wraps them);
- everything else that does I/O (MCP tool listings and instructions, dynamic toolsets, capability
  operations, event-stream handling) -> ``ctx.tool("<agent>.operation", ...)``, read-only: a tool
  list is read from the log on replay, never from a cache that may have changed;
- argument validation is pure and runs in the workflow.

Durable waits: agent-graph sleeps are ``ctx.sleep``; an external event (``RequestInput``, any
``wait_for_external_event``) is a recorded ``ask`` plus ``ctx.wait_signal``; a run that ends with
``DeferredToolRequests`` can wait for a signal carrying the ``DeferredToolResults`` (``run_agent``'s
``deferred_signal``) and go on -- a week later as well as at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import JsonValue, TypeAdapter
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.agent import AgentRunResult, EventStreamHandler
from pydantic_ai.capabilities.abstract import WrapRunHandler
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    CallableOperationBackend,
    DurabilityEngineSpec,
    DurableOperationBackend,
    DurableOperationId,
    ExternalEventError,
    ExternalEventWaiter,
    JournalOperationNamer,
    ModelRequestId,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
    ToolsetValidateToolArgumentsId,
    conversation_id_from_run_id,
    external_event_scope,
)
from pydantic_ai.durable_exec._utils import disable_threads
from pydantic_ai.models import Model
from pydantic_ai.tools import AgentDepsT, RunContext

from runtime.errors import TerminalError
from runtime.integrations.bridge import AgentRun, current_run
from runtime.integrations.calls import (
    UnitRef,
    UnrecordableValue,
    as_json,
    register_model,
    register_tool,
    tool_args,
)
from runtime.integrations.pydantic_ai.deltas import emitting
from runtime.integrations.pydantic_ai.message_forms import forms_of
from runtime.integrations.pydantic_ai.parameter_forms import parameter_forms_of
from runtime.integrations.pydantic_ai.returns import compacting, full_outcome
from runtime.integrations.pydantic_ai.units import (
    UNIT_ARG,
    mapped_errors,
    recorded_messages,
    recorded_parameters,
    recorded_response,
)
from runtime.models.deltas import streaming
from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.context import Context

OutputT = TypeVar("OutputT")
T = TypeVar("T")
_deferred_results = TypeAdapter(DeferredToolResults)


def unit_args(ref: UnitRef) -> dict[str, Any]:
    """The keyword argument that carries a call's body into ``ctx.tool`` (typed as any argument,
    so it cannot be taken for ``compensate_with``)."""
    return {UNIT_ARG: ref}


def _unrecordable(error: Exception) -> BaseException:
    return UnrecordableValue(
        f"its result cannot be recorded as JSON, so a replay could not return it: {error}"
    )


@dataclass(init=False, kw_only=True)
class AgentlogDurability(BaseDurabilityCapability[AgentDepsT]):
    """Makes the agent it is attached to durable when it runs in an agentlog workflow (``run_agent``).

    ``app`` gets the agent's agentlog model and tools, registered as they are first needed (their
    names: ``"<agent>.model"``, ``"<agent>.<tool>"``, ``"<agent>.operation"``). ``effects`` names the
    tools that change the world, each with the arguments that identify its effect (``None``: all of
    them); such a tool gets its idempotency key from ``idempotency_key()``. ``model_retry`` and
    ``tool_retry`` are the agentlog retry policies of the calls (default ``RetryPolicy()``).
    ``event_stream_handler`` sees the run's events when they first happen: a model request then
    streams (its events go to the handler inside the call, the final response is recorded), and
    each other event is handed over in a recorded call -- a replay serves them, it does not call
    the handler again. ``prompt_version`` is recorded with each model call (``agentlog upgrade
    check`` and ``audit cost --by prompt_version`` show it): bump it when the instructions change.
    ``delegates`` maps a tool that hands work to another agent (agent as a tool) to the workflow that
    runs that agent: a call of the tool starts that workflow as a child run with the tool's arguments
    as its input and returns its result -- the delegate gets its own durable history -- instead of
    running the tool's body (docs/integrations.md, "Delegation as child runs").
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="agentlog",
        durable_unit_noun="call",
        durable_container_noun="workflow",
        codec=JSON_CODEC,  # agentlog journals JSON: the base reduces values before they are recorded
        serialization_failure=_unrecordable,
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        # An MCP session is bound to the event loop that opened it, and calls run on the worker's
        # loop while the run's container is the agent's (runtime.integrations.bridge): so each call
        # that needs the server enters the toolset itself, as Temporal's activities do.
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-outside-durable",
            "dynamic": "enter-never",
        },
        journal_discovery=True,
        # Parallel tool calls stay parallel: the bridge issues them as one batch in the order the
        # agent's tasks reached them and gives the outcomes back together (runtime.integrations.bridge).
        sequential_tools_in_durable_context=False,
        tool_config_key="agentlog",
    )

    def __init__(
        self,
        app: App,
        *,
        effects: Mapping[str, Sequence[str] | None] | None = None,
        models: Mapping[str, Model] | None = None,
        name: str | None = None,
        model_retry: RetryPolicy | None = None,
        tool_retry: RetryPolicy | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
        prompt_version: str | None = None,
        delegates: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(models=models, name=name, event_stream_handler=event_stream_handler)
        self.app = app
        self.effects: dict[str, tuple[str, ...] | None] = {
            tool: None if args is None else tuple(args) for tool, args in (effects or {}).items()
        }
        self.model_retry = model_retry
        self.tool_retry = tool_retry
        self.prompt_version = prompt_version
        self.delegates = dict(delegates or {})  # tool -> the workflow its delegate runs as (a child run)

    # --- the durable container: an agent run inside an agentlog workflow -----------------------
    @property
    def in_durable_context(self) -> bool:
        return current_run() is not None

    def get_default_run_id(self) -> str | None:
        run = current_run()
        if run is None:
            return None
        return f"{run.ctx.run_id}/{self.name}/{run.next_count('pydantic-ai-run')}"

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    def get_run_clock(self) -> Callable[[], datetime] | None:
        run = current_run()
        return None if run is None else run.ctx.now

    async def get_run_start_time(self, run_id: str) -> datetime | None:
        run = current_run()
        return None if run is None else run.ctx.now()

    async def wrap_run(self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        run = current_run()
        if run is None:
            return await super().wrap_run(ctx, handler=handler)

        async def durable_sleep(seconds: float) -> None:
            await run.wait_for(run.ctx.sleep(max(seconds, 0.0)))

        # Sync callbacks (instructions, validators) run inline, as in Temporal's workflows: the agent
        # loop is driven on the workflow's thread, which would only wait for a thread of their own.
        with (
            external_event_scope(_SignalWaiter(self, run)),
            Agent.using_sleep(durable_sleep),
            disable_threads(),
        ):
            return await super().wrap_run(ctx, handler=handler)

    def get_durable_operation_backend(self) -> DurableOperationBackend[Any]:
        # Asked several times a model request (the base binds a callable engine's operations per
        # request): one backend per capability, not one per ask. Kept in the instance's own
        # ``__dict__`` and checked against it, as ``from_agent`` binds a shallow copy.
        backend = self.__dict__.get("_agentlog_backend")
        if not isinstance(backend, _Backend) or backend.durability is not self:
            backend = self.__dict__["_agentlog_backend"] = _Backend(self)
        return backend

    def _model_stream_event_handler(self) -> EventStreamHandler[AgentDepsT] | None:
        # Called inside a streamed model request's call, where the worker's sink is (live only):
        # its parts are emitted as deltas as they form (runtime.integrations.pydantic_ai.deltas).
        handler = super()._model_stream_event_handler()
        return emitting(handler) if streaming() else handler

    # --- agentlog names ---------------------------------------------------------------------------
    def model_name(self, model_id: str | None) -> str:
        suffix = "" if model_id in (None, "default", self.default_model_id) else f".{model_id}"
        return f"{self.name}.model{suffix}"

    def tool_name(self, operation_id: ToolsetCallToolId, tool: str) -> str:
        if operation_id.toolset_kind == "function":
            return f"{self.name}.{tool}"
        return f"{self.name}.{operation_id.toolset_id}.{tool}"

    @property
    def operation_tool(self) -> str:
        return f"{self.name}.operation"

    def register_operation_tool(self) -> None:
        register_tool(
            self.app,
            self.operation_tool,
            unit_arg=UNIT_ARG,
            effect=False,
            key_args=None,
            retry=self.tool_retry,
            errors=mapped_errors,
        )


_NO_CONFIG = RoleBasedOperationConfig[None](model=None, event=None, capability=None, tool=None)


class _Backend(CallableOperationBackend[None]):
    """Each PydanticAI durable unit as one agentlog call (see the module docstring)."""

    def __init__(self, durability: AgentlogDurability[Any]) -> None:
        super().__init__(
            namer=JournalOperationNamer(
                durability.name, default_model_id=durability.default_model_id or "default"
            ),
            config=_NO_CONFIG,
        )
        self._durability = durability

    @property
    def durability(self) -> AgentlogDurability[Any]:
        return self._durability

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: None,
    ) -> object:
        run = current_run()
        if run is None:  # outside a workflow, or inside a call's body: nothing to record
            return await body()
        if isinstance(operation_id, ModelRequestId):
            return await self._model_request(run, operation_id, name, body, cache_key)
        if isinstance(operation_id, ToolsetCallToolId):
            return await self._tool_call(run, operation_id, name, body, cache_key)
        if isinstance(operation_id, ToolsetValidateToolArgumentsId):
            return await body()  # pure: checks recorded arguments against the tool's schema
        return await self._operation(run, name, body)

    async def _model_request(
        self,
        run: AgentRun[Any],
        operation_id: ModelRequestId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
    ) -> object:
        durability = self._durability
        model = durability.model_name(operation_id.model_id)
        register_model(
            durability.app,
            model,
            unit_arg=UNIT_ARG,
            retry=durability.model_retry,
            recorded=recorded_response,
            errors=mapped_errors,
        )
        _model_id, messages, settings, parameters, _run_context = cache_key
        params: dict[str, Any] = {
            UNIT_ARG: UnitRef(name, body),
            "settings": as_json(settings, f"model {model!r} settings"),
            "parameters": recorded_parameters(
                parameters, f"model {model!r} request parameters", parameter_forms_of(run)
            ),
        }
        asked = run.ctx.model(
            model,
            messages=recorded_messages(messages, forms_of(run)),
            prompt_version=durability.prompt_version,
            **params,
        )
        recorded = await run.wait_for(asked)
        return recorded["response"]

    async def _tool_call(
        self,
        run: AgentRun[Any],
        operation_id: ToolsetCallToolId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
    ) -> object:
        durability = self._durability
        tool, arguments = str(cache_key[0]), cache_key[1]
        if tool in durability.delegates:  # agent as a tool: the delegate runs as a child run
            child = run.ctx.child(durability.delegates[tool], tool_args(arguments, tool, UNIT_ARG))
            # Its result as the tool's outcome, in the form a tool call's is recorded in (the codec's).
            return {"kind": "tool_return", "result": await run.wait_for(child)}
        agentlog_tool = durability.tool_name(operation_id, tool)
        effect = tool in durability.effects
        register_tool(
            durability.app,
            agentlog_tool,
            unit_arg=UNIT_ARG,
            effect=effect,
            key_args=durability.effects.get(tool),
            retry=durability.tool_retry,
            errors=mapped_errors,
            record_unit=False,  # the agentlog tool's name says which tool: ~70 bytes a call saved
        )
        args = tool_args(arguments, tool, UNIT_ARG)
        args[UNIT_ARG] = UnitRef(name, compacting(body))
        return full_outcome(await run.wait_for(run.ctx.tool(agentlog_tool, **args)))

    async def _operation(
        self, run: AgentRun[Any], name: str, body: Callable[[], Awaitable[object]]
    ) -> object:
        tool = self._durability.operation_tool
        self._durability.register_operation_tool()
        return await run.wait_for(run.ctx.tool(tool, **unit_args(UnitRef(name, body))))


class _SignalWaiter(ExternalEventWaiter):
    """An external event as a recorded ``ask`` and an agentlog signal wait: the signal's name is
    the token's tail, so ``agentlog signal RUN <name> --payload '<json>'`` resolves it, days later too."""

    def __init__(self, durability: AgentlogDurability[Any], run: AgentRun[Any]) -> None:
        self._durability = durability
        self._run = run

    async def wait(
        self, name: str, *, ask: Callable[[str], Awaitable[JsonValue]], timeout: timedelta | None
    ) -> JsonValue:
        run = self._run
        signal = f"{name}#{run.next_count(f'event:{name}')}"
        token = f"{run.ctx.run_id}/{signal}"

        async def ask_once() -> object:
            return as_json(await ask(token), f"the answer to external event {name!r}")

        tool = self._durability.operation_tool
        self._durability.register_operation_tool()
        answered = await run.wait_for(
            run.ctx.tool(tool, event=signal, **unit_args(UnitRef(f"{self._durability.name}__ask", ask_once)))
        )
        if answered is not None:
            return answered  # type: ignore[no-any-return]  # the JSON ask returned, as recorded
        seconds = None if timeout is None else timeout.total_seconds()
        try:
            return await run.wait_for(run.ctx.wait_signal(signal, timeout=seconds))  # type: ignore[no-any-return]
        except TimeoutError as error:
            raise ExternalEventError(f"no signal {signal!r} within {timeout}") from error


async def run_agent(
    ctx: Context,
    agent: Agent[AgentDepsT, OutputT],
    user_prompt: str | None = None,
    *,
    deferred_signal: str | None = None,
    **run_kwargs: Any,
) -> AgentRunResult[OutputT]:
    """Run ``agent`` (which has an ``AgentlogDurability``) inside the workflow of ``ctx``.

    ``run_kwargs`` go to ``agent.run`` (``deps``, ``message_history``, ``output_type`` ...). With
    ``deferred_signal``, a run that ends with ``DeferredToolRequests`` (tools that need approval or
    run elsewhere) waits for that signal, whose JSON payload is the ``DeferredToolResults``
    (``{"approvals": {"<tool call id>": true}, "calls": {...}}``), and resumes the agent with it --
    as many times as it asks. Returns PydanticAI's ``AgentRunResult``; a workflow returns JSON made
    from it (``result.output``, ``result.usage()`` ...)."""
    if AgentlogDurability.from_agent(agent) is None:
        raise TerminalError(
            f"agent {agent.name!r} has no AgentlogDurability capability: "
            "Agent(..., capabilities=[AgentlogDurability(app)])"
        )
    run: AgentRun[AgentRunResult[OutputT]]

    async def start() -> AgentRunResult[OutputT]:
        result: AgentRunResult[OutputT] = await agent.run(user_prompt, **run_kwargs)
        while deferred_signal is not None and isinstance(result.output, DeferredToolRequests):
            payload = await run.wait_for(ctx.wait_signal(deferred_signal))
            results = _deferred_results.validate_python(payload)
            later = {k: v for k, v in run_kwargs.items() if k != "message_history"}
            result = await agent.run(
                message_history=result.all_messages(), deferred_tool_results=results, **later
            )
        return result

    run = AgentRun(ctx, start, name=agent.name or "agent")
    return await run


async def run_in_workflow(ctx: Context, agent: Agent[AgentDepsT, Any], body: Callable[[], Awaitable[T]]) -> T:
    """Run ``body`` -- your code that drives ``agent`` with ``run_stream``, ``iter`` or ``run`` --
    inside the workflow of ``ctx``, as ``run_agent`` runs ``agent.run``::

        async def answer() -> str:
            async with agent.run_stream(prompt) as result:
                async for text in result.stream_text(delta=True):
                    ...  # the recorded answer's text (deterministic: the same on a replay)
                return await result.get_output()

        output = await run_in_workflow(ctx, agent, answer)

    Each model request is one recorded call either way. A streamed one (``run_stream``,
    ``node.stream`` in ``iter``) streams inside its call, where its text and tool arguments are
    emitted as deltas to the run's watchers as they form (first execution only); ``body`` reads
    the recorded response, streamed back to it, live and on a replay alike. ``body`` runs on the
    agent loop: like agent code, it may await only the agent (no I/O of its own)."""
    if AgentlogDurability.from_agent(agent) is None:
        raise TerminalError(
            f"agent {agent.name!r} has no AgentlogDurability capability: "
            "Agent(..., capabilities=[AgentlogDurability(app)])"
        )

    async def start() -> T:
        return await body()

    return await AgentRun(ctx, start, name=agent.name or "agent")


__all__ = ["AgentlogDurability", "run_agent", "run_in_workflow"]
