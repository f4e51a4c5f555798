"""``AgentlogRunner``: ``agents.Runner.run`` inside an agentlog workflow, every model call, function
tool and guardrail recorded.

The Agents SDK's own seams, as Temporal's plugin and DBOS's runner use them:

- models: ``RunConfig(model=...)`` is one ``Model`` for every agent of the run; it records each
  ``get_response`` as ``ctx.model("<runner>.model", ...)`` -- the instructions and input items as
  the messages, the asking agent, its settings, tools, handoffs and output schema as params -- and
  has the answering agent's own model (``agent.model``, or the run's model provider for a name)
  answer inside the call. Which agent asks is told by ``RunHooks.on_llm_start``, so a handoff
  shows in the log as the next model call's ``agent``;
- function tools: each ``FunctionTool.on_invoke_tool`` becomes ``ctx.tool("<runner>.<tool>", **args)``
  (an effect when named in ``effects``; the key from ``idempotency_key()``). Parallel tool calls are
  issued together and run side by side; replay serves them in the recorded order (the bridge);
- guardrails: each input or output guardrail function is a read-only recorded call
  (``"<runner>.guardrail.<name>"``), its ``GuardrailFunctionOutput`` the result;
- handoffs need nothing of their own: the model's recorded answer names the handoff, and the SDK
  switches agents in the workflow, the same way on every replay. Agents reached by a handoff get
  the same wrapping (their tools and guardrails are recorded too).

The agents the caller passes are not changed: the runner works on wrapped clones.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    GuardrailFunctionOutput,
    Handoff,
    InputGuardrail,
    Model,
    ModelProvider,
    ModelResponse,
    ModelSettings,
    OutputGuardrail,
    RunConfig,
    RunContextWrapper,
    Runner,
    RunResult,
    RunResultStreaming,
    StreamEvent,
    Tool,
    Usage,
)
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.lifecycle import RunHooks
from agents.models.multi_provider import MultiProvider
from agents.run import DEFAULT_MAX_TURNS
from pydantic import TypeAdapter

from runtime.integrations.bridge import AgentRun, current_run
from runtime.integrations.calls import ModelResult, UnitRef, as_json, register_model, register_tool, tool_args
from runtime.integrations.openai_agents import streaming
from runtime.integrations.openai_agents.compact import compact_item, compact_usage
from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.context import Context

UNIT_ARG = "agents_unit"  # the argument (tools) / parameter (models) carrying the call's body
_output_items = TypeAdapter(list[TResponseOutputItem])
_usage = TypeAdapter(Usage)


def unit_args(ref: UnitRef) -> dict[str, Any]:
    """The keyword argument that carries a call's body into ``ctx.tool`` (typed as any argument,
    so it cannot be taken for ``compensate_with``)."""
    return {UNIT_ARG: ref}


def _recorded_response(response: ModelResponse) -> dict[str, Any]:
    usage = response.usage
    return {
        # Compact (runtime.integrations.openai_agents.compact): the items as the SDK sends them back.
        "output": [compact_item(item) for item in response.output],
        "usage": compact_usage(usage),
        "response_id": response.response_id,
    }


def _recorded_call(payload: Any) -> ModelResult:
    """What a model call records: the response, and its usage beside it where the worker reads it."""
    usage = payload.get("usage") or {}
    details = usage.get("input_tokens_details") or {}
    # A compact usage leaves its zero counters out.
    counts = {
        "input_tokens": usage.get("input_tokens", 0),
        "output_tokens": usage.get("output_tokens", 0),
        "cached_tokens": details.get("cached_tokens", 0),
    }
    return ModelResult(payload, counts, None)


def _response(recorded: dict[str, Any]) -> ModelResponse:
    payload = recorded["response"]
    return ModelResponse(
        output=_output_items.validate_python(payload["output"]),
        usage=_usage.validate_python(payload["usage"]),
        response_id=payload.get("response_id"),
    )


def _messages(system_instructions: str | None, input: str | list[TResponseInputItem]) -> list[dict[str, Any]]:
    items = [{"role": "user", "content": input}] if isinstance(input, str) else as_json(input, "model input")
    if system_instructions:
        return [{"role": "system", "content": system_instructions}, *items]
    return list(items)


@dataclasses.dataclass(frozen=True)
class _Request:
    """One model request as the SDK makes it (``Model.get_response``'s arguments, ``stream_response``'s
    too): asked of the answering model, and what the recorded call's messages and params are made of."""

    system_instructions: str | None
    input: str | list[TResponseInputItem]
    model_settings: ModelSettings
    tools: list[Tool]
    output_schema: Any
    handoffs: list[Handoff[Any, Any]]
    tracing: Any
    kwargs: dict[str, Any]

    def asked(self) -> tuple[Any, ...]:
        """The positional arguments, in ``Model``'s order (``kwargs`` go beside them)."""
        return (
            self.system_instructions,
            self.input,
            self.model_settings,
            self.tools,
            self.output_schema,
            self.handoffs,
            self.tracing,
        )


@dataclasses.dataclass
class _Speaker:
    """The agent whose model is asked next (set by the run's hooks before each model call)."""

    agent: Agent[Any] | None = None


class _TrackingHooks(RunHooks[Any]):
    """Tells the recorded model which agent is asking; forwards everything to the caller's hooks."""

    def __init__(self, speaker: _Speaker, inner: RunHooks[Any] | None) -> None:
        self._speaker = speaker
        self._inner = inner or RunHooks()

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
        self._speaker.agent = agent
        await self._inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        await self._inner.on_llm_end(context, agent, response)

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        await self._inner.on_agent_start(context, agent)

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        await self._inner.on_agent_end(context, agent, output)

    async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
        await self._inner.on_handoff(context, from_agent, to_agent)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        await self._inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        await self._inner.on_tool_end(context, agent, tool, result)


class _RecordedModel(Model):
    """The run's one ``Model``: each request an agentlog model call answered by the asking agent's model."""

    def __init__(self, runner: AgentlogRunner, speaker: _Speaker, provider: ModelProvider) -> None:
        self._runner = runner
        self._speaker = speaker
        self._provider = provider

    def _model_of(self, agent: Agent[Any] | None) -> Model:
        chosen = None if agent is None else agent.model
        return chosen if isinstance(chosen, Model) else self._provider.get_model(chosen)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: Any,
        handoffs: list[Handoff[Any, Any]],
        tracing: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        request = _Request(
            system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, kwargs
        )
        agent = self._speaker.agent

        async def ask() -> ModelResponse:
            return await self._model_of(agent).get_response(*request.asked(), **request.kwargs)

        run = current_run()
        if run is None:
            return await ask()

        async def body() -> dict[str, Any]:
            return _recorded_response(await ask())

        return await self._recorded(run, agent, body, request)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: Any,
        handoffs: list[Handoff[Any, Any]],
        tracing: Any,
        **kwargs: Any,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """``run_streamed``'s model request: the same recorded call as ``get_response``'s, whose
        answering model streams inside it (its deltas emitted, live only); the SDK gets the recorded
        response as one ``response.completed`` (runtime.integrations.openai_agents.streaming)."""
        request = _Request(
            system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, kwargs
        )
        agent = self._speaker.agent

        def ask() -> AsyncIterator[TResponseStreamEvent]:
            return self._model_of(agent).stream_response(*request.asked(), **request.kwargs)

        run = current_run()
        if run is None:
            async for event in ask():
                yield event
            return

        async def body() -> dict[str, Any]:
            return _recorded_response(await streaming.streamed_response(ask(), self._runner.model_name))

        yield streaming.completed_event(await self._recorded(run, agent, body, request))

    async def _recorded(
        self,
        run: AgentRun[Any],
        agent: Agent[Any] | None,
        body: Callable[[], Awaitable[dict[str, Any]]],
        request: _Request,
    ) -> ModelResponse:
        """The model request as one agentlog call: ``body`` answers it in the worker."""
        runner = self._runner
        name = runner.model_name
        register_model(runner.app, name, unit_arg=UNIT_ARG, retry=runner.model_retry, recorded=_recorded_call)
        params: dict[str, Any] = {
            UNIT_ARG: UnitRef(f"{name}:{agent.name if agent else '?'}", body),
            "agent": None if agent is None else agent.name,
            "settings": as_json(request.model_settings.to_json_dict(), "model settings"),
            "tools": [tool.name for tool in request.tools],
            "handoffs": [handoff.tool_name for handoff in request.handoffs],
            "output": None if request.output_schema is None else request.output_schema.name(),
        }
        messages = _messages(request.system_instructions, request.input)
        recorded = await run.wait_for(run.ctx.model(name, messages=messages, **params))
        return _response(recorded)


class AgentlogRunner:
    """Runs ``agents.Agent``s inside agentlog workflows (``await runner.run(ctx, agent, input)``).

    ``app`` gets the runner's agentlog model and tools, registered as they are first needed
    (``"<name>.model"``, ``"<name>.<tool>"``, ``"<name>.guardrail.<guardrail>"``). ``effects`` names
    the function tools that change the world, each with the arguments that identify its effect
    (``None``: all); such a tool reads its key with ``idempotency_key()``. ``model_retry`` /
    ``tool_retry``: the agentlog retry policies of the calls. ``delegates`` maps a function tool that
    hands work to another agent (``Agent.as_tool``) to the workflow that runs that agent: a call of
    the tool starts that workflow as a child run with the tool's arguments as its input (for
    ``as_tool``: ``{"input": ...}``) and returns its result, instead of running the agent inline."""

    def __init__(
        self,
        app: App,
        *,
        name: str,
        effects: Mapping[str, Sequence[str] | None] | None = None,
        model_retry: RetryPolicy | None = None,
        tool_retry: RetryPolicy | None = None,
        delegates: Mapping[str, str] | None = None,
    ) -> None:
        self.app = app
        self.name = name
        self.delegates = dict(delegates or {})  # tool -> the workflow its delegate runs as (a child run)
        self.effects = {tool: None if args is None else tuple(args) for tool, args in (effects or {}).items()}
        self.model_retry = model_retry
        self.tool_retry = tool_retry

    @property
    def model_name(self) -> str:
        return f"{self.name}.model"

    async def run(
        self,
        ctx: Context,
        agent: Agent[Any],
        input: str | list[TResponseInputItem],
        *,
        context: Any = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        hooks: RunHooks[Any] | None = None,
        run_config: RunConfig | None = None,
    ) -> RunResult:
        """``Runner.run(agent, input, ...)`` with every call recorded in the run of ``ctx``. The
        SDK's tracing is off unless ``run_config`` turns it on (its exporter would reach the
        network from the workflow)."""
        wrapped, kwargs = self._prepared(agent, context, max_turns, hooks, run_config)

        async def start() -> RunResult:
            return await Runner.run(wrapped, input, **kwargs)

        return await AgentRun(ctx, start, name=self.name)

    async def run_streamed(
        self,
        ctx: Context,
        agent: Agent[Any],
        input: str | list[TResponseInputItem],
        *,
        on_event: Callable[[StreamEvent], Awaitable[None] | None] | None = None,
        context: Any = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        hooks: RunHooks[Any] | None = None,
        run_config: RunConfig | None = None,
    ) -> RunResultStreaming:
        """``Runner.run_streamed(agent, input, ...)`` in the run of ``ctx``: its ``stream_events()``
        are read to the end inside the workflow, each handed to ``on_event`` (sync or async; it runs
        on the agent loop, so it may do no I/O), and the finished ``RunResultStreaming`` is returned.
        Each model request is the same recorded call as ``run``'s; its answering model streams
        inside it, the text and tool arguments emitted as deltas to the run's watchers as they form
        (first execution only). The events the workflow reads come from the recorded responses --
        the run's items, one ``response.completed`` per model request -- the same on a replay."""
        wrapped, kwargs = self._prepared(agent, context, max_turns, hooks, run_config)

        async def start() -> RunResultStreaming:
            result = Runner.run_streamed(wrapped, input, **kwargs)
            async for event in result.stream_events():
                handled = on_event(event) if on_event is not None else None
                if isinstance(handled, Awaitable):
                    await handled
            return result

        return await AgentRun(ctx, start, name=self.name)

    def _prepared(
        self,
        agent: Agent[Any],
        context: Any,
        max_turns: int,
        hooks: RunHooks[Any] | None,
        run_config: RunConfig | None,
    ) -> tuple[Agent[Any], dict[str, Any]]:
        """What ``run`` and ``run_streamed`` hand the SDK's runner: the wrapped agent, and the
        keyword arguments -- the recorded model in the run config (tracing off unless it is on),
        hooks that tell it which agent asks."""
        config = run_config or RunConfig(tracing_disabled=True)
        speaker = _Speaker()
        provider = config.model_provider if config.model_provider is not None else MultiProvider()
        recorded_config = dataclasses.replace(config, model=_RecordedModel(self, speaker, provider))
        kwargs = {
            "context": context,
            "max_turns": max_turns,
            "hooks": _TrackingHooks(speaker, hooks),
            "run_config": recorded_config,
        }
        return self._wrap_agent(agent, {}), kwargs

    # --- wrapping the agent graph ------------------------------------------------------------
    def _wrap_agent(self, agent: Agent[Any], done: dict[int, Agent[Any]]) -> Agent[Any]:
        if id(agent) in done:
            return done[id(agent)]
        clone = agent.clone()
        done[id(agent)] = clone  # before the handoffs: agents may hand back to each other
        clone.tools = [self._wrap_tool(tool) for tool in agent.tools]
        clone.input_guardrails = [self._wrap_input_guardrail(g) for g in agent.input_guardrails]
        clone.output_guardrails = [self._wrap_output_guardrail(g) for g in agent.output_guardrails]
        clone.handoffs = [
            self._wrap_agent(target, done) if isinstance(target, Agent) else self._wrap_handoff(target, done)
            for target in agent.handoffs
        ]
        return clone

    def _wrap_handoff(self, handoff: Handoff[Any, Any], done: dict[int, Agent[Any]]) -> Handoff[Any, Any]:
        original = handoff.on_invoke_handoff

        async def invoke(context: RunContextWrapper[Any], arguments: str) -> Any:
            target = await original(context, arguments)
            return self._wrap_agent(target, done) if isinstance(target, Agent) else target

        return dataclasses.replace(handoff, on_invoke_handoff=invoke)

    def _wrap_tool(self, tool: Tool) -> Tool:
        if not isinstance(tool, FunctionTool):
            return tool  # hosted tools run at the provider, inside the recorded model call
        original = tool.on_invoke_tool
        name = f"{self.name}.{tool.name}"
        effect = tool.name in self.effects

        async def invoke(tool_context: Any, arguments: str) -> Any:
            run = current_run()
            if run is None:
                return await original(tool_context, arguments)
            register_tool(
                self.app,
                name,
                unit_arg=UNIT_ARG,
                effect=effect,
                key_args=self.effects.get(tool.name),
                retry=self.tool_retry,
            )
            try:
                parsed = json.loads(arguments) if arguments else {}
            except json.JSONDecodeError:
                parsed = {"raw_arguments": arguments}  # the SDK reports the bad JSON to the model
            args = tool_args(parsed if isinstance(parsed, dict) else {"value": parsed}, tool.name, UNIT_ARG)
            if tool.name in self.delegates:  # agent as a tool: the delegate runs as a child run
                return await run.wait_for(run.ctx.child(self.delegates[tool.name], args))

            async def body() -> Any:
                return as_json(await original(tool_context, arguments), f"tool {name!r} result")

            args[UNIT_ARG] = UnitRef(name, body)
            return await run.wait_for(run.ctx.tool(name, **args))

        return dataclasses.replace(tool, on_invoke_tool=invoke)

    def _recorded_guardrail(
        self, kind: str, guardrail_name: str, function: Callable[..., Any]
    ) -> Callable[..., Awaitable[GuardrailFunctionOutput]]:
        tool = f"{self.name}.guardrail.{guardrail_name}"

        async def guarded(*args: Any) -> GuardrailFunctionOutput:
            async def ask() -> GuardrailFunctionOutput:
                answer = function(*args)
                return await answer if isinstance(answer, Awaitable) else answer  # type: ignore[no-any-return]

            run = current_run()
            if run is None:
                return await ask()
            register_tool(
                self.app, tool, unit_arg=UNIT_ARG, effect=False, key_args=None, retry=self.tool_retry
            )

            async def body() -> dict[str, Any]:
                output = await ask()
                return {
                    "output_info": as_json(output.output_info, f"{kind} guardrail {guardrail_name!r} output"),
                    "tripwire_triggered": bool(output.tripwire_triggered),
                }

            recorded = await run.wait_for(run.ctx.tool(tool, **unit_args(UnitRef(tool, body))))
            return GuardrailFunctionOutput(
                output_info=recorded["output_info"], tripwire_triggered=recorded["tripwire_triggered"]
            )

        return guarded

    def _wrap_input_guardrail(self, guardrail: InputGuardrail[Any]) -> InputGuardrail[Any]:
        function = self._recorded_guardrail("input", guardrail.get_name(), guardrail.guardrail_function)
        return dataclasses.replace(guardrail, guardrail_function=function, name=guardrail.get_name())

    def _wrap_output_guardrail(self, guardrail: OutputGuardrail[Any]) -> OutputGuardrail[Any]:
        function = self._recorded_guardrail("output", guardrail.get_name(), guardrail.guardrail_function)
        return dataclasses.replace(guardrail, guardrail_function=function, name=guardrail.get_name())
