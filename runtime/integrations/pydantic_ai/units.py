"""PydanticAI's durable units as agentlog calls: what is recorded, and what the worker runs.

PydanticAI hands its durable backend each unit as an async ``body`` (the model request, the tool
call) plus the unit's inputs. The workflow side records the inputs as an agentlog command; the
worker later runs the registered agentlog model or tool, which must find that same ``body``. It
travels in the command's arguments as a ``UnitRef``: a ``str`` (the unit's stable PydanticAI
operation name, which is what gets recorded and hashed) that also holds the body. A replayed
command gets a fresh ``UnitRef`` from the replayed agent, so an in-doubt call re-executed after a
crash runs the body of the agent loop that exists now.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pydantic_ai import exceptions as pai_errors
from pydantic_core import PydanticSerializationError, to_jsonable_python

from runtime.errors import TerminalError
from runtime.models.errors import status_error
from runtime.workflow.app import App, RetryPolicy

# The argument (tool calls) or parameter (model calls) that carries the unit's body.
UNIT_ARG = "pydantic_ai_unit"

_idempotency_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "agentlog_pydantic_ai_idempotency_key", default=None
)


class UnrecordableValue(TerminalError):
    """A model or tool call whose input or result cannot be recorded as JSON: replaying it could
    not give the agent the same value, so the call fails instead of replaying differently."""


class UnitRef(str):
    """A unit's recorded name that also carries its body to the worker (never recorded itself)."""

    body: Callable[[], Awaitable[object]] | None

    def __new__(cls, name: str, body: Callable[[], Awaitable[object]] | None = None) -> UnitRef:
        ref = super().__new__(cls, name)
        ref.body = body
        return ref


def idempotency_key() -> str:
    """The idempotency key of the effecting tool call running now (derived from the run and the
    call's ``key_args``, recorded before the call): pass it to the service the tool changes."""
    key = _idempotency_key.get()
    if key is None:
        raise TerminalError(
            "idempotency_key() is only known inside a tool named in AgentlogDurability(effects=...), "
            "run from an agentlog workflow"
        )
    return key


def as_json(value: Any, what: str) -> Any:
    """``value`` as JSON-compatible data, or an UnrecordableValue naming ``what`` and the value."""
    try:
        return to_jsonable_python(value)
    except (PydanticSerializationError, TypeError, ValueError) as error:
        raise UnrecordableValue(f"{what}: {value!r} cannot be recorded as JSON ({error})") from error


def recorded_messages(messages: Any) -> list[dict[str, Any]]:
    """The model request's messages as recorded: PydanticAI's JSON shape without the timestamps
    that requests take from the clock when the agent builds them (a replayed agent builds them
    again at another time; the responses' timestamps come from the log and are kept)."""
    dumped = as_json(messages, "model request messages")
    return [_without_request_timestamps(message) for message in dumped]


def recorded_parameters(parameters: Any, what: str) -> Any:
    """The request parameters as recorded (tool definitions, output schema ...): the public fields
    only, not PydanticAI's private bookkeeping (telemetry ids and such)."""
    dumped = as_json(parameters, what)
    if isinstance(dumped, dict):
        return {k: v for k, v in dumped.items() if not k.startswith("_")}
    return dumped


def _without_request_timestamps(message: dict[str, Any]) -> dict[str, Any]:
    if message.get("kind") != "request":
        return message
    kept = {k: v for k, v in message.items() if k != "timestamp"}
    kept["parts"] = [
        {k: v for k, v in part.items() if k != "timestamp"} if isinstance(part, dict) else part
        for part in message.get("parts", [])
    ]
    return kept


def _unit_body(ref: object, kind: str, name: str) -> Callable[[], Awaitable[object]]:
    body = getattr(ref, "body", None)
    if body is None:
        raise TerminalError(
            f"{kind} {name!r} was asked to run without its PydanticAI agent loop: run the agent with "
            "runtime.integrations.pydantic_ai.run_agent inside an agentlog workflow"
        )
    return body  # type: ignore[no-any-return]  # a UnitRef's body, set by the workflow side


@contextmanager
def _mapped_errors(kind: str, name: str) -> Iterator[None]:
    """PydanticAI's failures as agentlog's: an HTTP status by the same rule as the SDK adapters;
    a value the codec cannot encode, a user error or unexpected model behaviour is terminal."""
    try:
        yield
    except pai_errors.ModelHTTPError as error:
        raise status_error(error.status_code, f"{kind} {name!r}", str(error.body or error)) from error
    except UnrecordableValue as error:  # the codec's failure (engine_spec.serialization_failure)
        raise UnrecordableValue(f"{kind} {name!r}: {error}") from error
    except PydanticSerializationError as error:
        raise UnrecordableValue(
            f"{kind} {name!r}: its result cannot be recorded as JSON ({error})"
        ) from error
    except (pai_errors.UserError, pai_errors.UnexpectedModelBehavior) as error:
        raise TerminalError(f"{kind} {name!r}: {type(error).__name__}: {error}") from error


def _model_usage(response: Any) -> tuple[dict[str, int], str | None]:
    """The usage and model name of a recorded ``ModelResponse``, in the keys agentlog reads."""
    if not isinstance(response, dict):
        return {}, None
    usage = response.get("usage") or {}
    shown = {
        "input_tokens": usage.get("input_tokens"),
        "output_tokens": usage.get("output_tokens"),
        "cached_tokens": usage.get("cache_read_tokens"),
    }
    model = response.get("model_name")
    return {k: v for k, v in shown.items() if isinstance(v, int)}, model if isinstance(model, str) else None


def register_model(app: App, name: str, retry: RetryPolicy | None) -> None:
    """The agentlog model that runs PydanticAI model requests of one agent (once per app)."""
    if name in app.models:
        return

    async def model_request(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        body = _unit_body(params.get(UNIT_ARG), "model", name)
        with _mapped_errors("model", name):
            response = await body()
        usage, model = _model_usage(response)
        return {"response": response, "usage": usage, "model": model}

    app.model(name, retry=retry)(model_request)


def register_tool(
    app: App, name: str, *, effect: bool, key_args: Sequence[str] | None, retry: RetryPolicy | None
) -> None:
    """The agentlog tool that runs one PydanticAI tool (or framework operation), once per app."""
    if name in app.tools:
        return

    async def tool_call(**kwargs: Any) -> Any:
        body = _unit_body(kwargs.get(UNIT_ARG), "tool", name)
        token = _idempotency_key.set(kwargs.get("idempotency_key"))
        try:
            with _mapped_errors("tool", name):
                return await body()
        finally:
            _idempotency_key.reset(token)

    # App.tool checks an effect's parameters by signature: say which keywords the tool takes.
    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter(arg, keyword) for arg in key_args or ()]
    if effect:
        parameters.append(inspect.Parameter("idempotency_key", keyword))
    parameters.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
    tool_call.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]  # read by inspect
    app.tool(
        name,
        effect=effect,
        key_args=tuple(key_args) if effect and key_args is not None else None,
        retry=retry,
    )(tool_call)
