"""A framework's units of work (a model request, a tool call) as agentlog calls.

A framework hands its integration each unit as an async ``body`` plus the unit's inputs. The
workflow side records the inputs as an agentlog command; the worker later runs the registered
agentlog model or tool, which must find that same ``body``. It travels in the command's
arguments as a ``UnitRef``: a ``str`` (the unit's stable name, which is what gets recorded and
hashed) that also holds the body. A replayed command gets a fresh ``UnitRef`` from the replayed
agent loop, so an in-doubt call re-executed after a crash runs the body of the loop that exists
now. Nothing here imports a framework.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from pydantic_core import PydanticSerializationError, to_jsonable_python

from runtime.errors import TerminalError
from runtime.log.records.responses import short_result
from runtime.workflow.app import App, RetryPolicy

Body = Callable[[], Awaitable[Any]]
ErrorMapping = Callable[[str, str], AbstractContextManager[None]]

_idempotency_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "agentlog_integration_idempotency_key", default=None
)


class UnrecordableValue(TerminalError):
    """A model or tool call whose input or result cannot be recorded as JSON: replaying it could
    not give the agent the same value, so the call fails instead of replaying differently."""


class UnitRef(str):
    """A unit's recorded name that also carries its body to the worker (never recorded itself).

    The run keeps every command it issued, this ref among its arguments, for as long as it is in
    memory; a body holds the framework's objects of its step (a PydanticAI request's run context,
    tool definitions, operation), so once the body has succeeded the ref keeps what the call
    returned instead (``settle``). A step's objects are then let go with the step, not with the
    run: a live 40-step PydanticAI run held about 3,400 of them for the collector to walk."""

    body: Body | None
    settled: bool
    result: Any

    def __new__(cls, name: str, body: Body | None = None) -> UnitRef:
        ref = super().__new__(cls, name)
        ref.body = body
        ref.settled = False
        ref.result = None
        return ref

    def settle(self, result: Any) -> None:
        """The call succeeded with ``result``: keep that, let the body go. An attempt the worker
        gave up on (timed out) may succeed after its retry began; a later retry returns this
        result, as a call that succeeded late would, rather than finding no body."""
        self.body, self.settled, self.result = None, True, result


class ModelResult(dict[str, Any]):
    """What a framework model call records, ``{"response": ...}``, with the usage and answering
    model beside it (``agentlog_usage``: ``{"usage": {...}, "model": ...}``, the keys the worker
    reads, runtime.worker.usage) rather than in it: the worker copies them into
    ``ModelCallCompleted``'s own fields, and the response in the JSON already holds them, so the
    recorded result does not carry them a second and third time."""

    __slots__ = ("agentlog_usage",)

    def __init__(
        self, response: Any, usage: dict[str, Any], model: str | None, *, short: bool = False
    ) -> None:
        """``short``: record ``{"r": ...}`` when it reads back as the same response
        (runtime.log.records.responses), the usage and model left to the record's fields."""
        counts = {k: v for k, v in usage.items() if type(v) is int and v >= 0}  # as the worker reads them
        model = model if isinstance(model, str) and model else None
        shortened = short_result(response, model, counts) if short else None
        if shortened is None:
            super().__init__(response=response)
        else:
            super().__init__(shortened)
        self.agentlog_usage = {"usage": counts, "model": model}


def idempotency_key() -> str:
    """The idempotency key of the effecting tool call running now (derived from the run and the
    call's ``key_args``, recorded before the call): pass it to the service the tool changes."""
    key = _idempotency_key.get()
    if key is None:
        raise TerminalError(
            "idempotency_key() is only known inside a tool declared as an effect (effects=...), "
            "run from an agentlog workflow"
        )
    return key


def as_json(value: Any, what: str) -> Any:
    """``value`` as JSON-compatible data, or an UnrecordableValue naming ``what`` and the value."""
    try:
        return to_jsonable_python(value)
    except (PydanticSerializationError, TypeError, ValueError) as error:
        raise UnrecordableValue(f"{what}: {value!r} cannot be recorded as JSON ({error})") from error


def unit_body(ref: object, kind: str, name: str) -> Body:
    body = getattr(ref, "body", None)
    if body is None:
        raise TerminalError(
            f"{kind} {name!r} was asked to run without the agent loop that issued it: run the agent "
            "through its runtime.integrations wrapper inside an agentlog workflow"
        )
    return body  # type: ignore[no-any-return]  # a UnitRef's body, set by the workflow side


def _no_mapping(kind: str, name: str) -> AbstractContextManager[None]:
    return nullcontext()


def register_model(
    app: App,
    name: str,
    *,
    unit_arg: str,
    retry: RetryPolicy | None,
    recorded: Callable[[Any], ModelResult],
    errors: ErrorMapping = _no_mapping,
) -> None:
    """The agentlog model ``name`` that runs a framework's model requests (once per app).
    ``recorded`` turns the body's result into what the call records: a ``ModelResult``.
    (Results recorded before it also hold ``"usage"`` and ``"model"``; readers read ``"response"``.)"""
    if name in app.models:
        return

    async def model_request(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        ref = params.get(unit_arg)
        if isinstance(ref, UnitRef) and ref.settled:
            return ref.result  # type: ignore[no-any-return]  # what this call returned before
        body = unit_body(ref, "model", name)
        with errors("model", name):
            result = recorded(await body())
        if isinstance(ref, UnitRef):
            ref.settle(result)
        return result

    app.model(name, retry=retry)(model_request)


def register_tool(
    app: App,
    name: str,
    *,
    unit_arg: str,
    effect: bool,
    key_args: Sequence[str] | None,
    retry: RetryPolicy | None,
    errors: ErrorMapping = _no_mapping,
    record_unit: bool = True,
) -> None:
    """The agentlog tool ``name`` that runs one framework tool (or operation), once per app. An
    effect's key is given to the body through ``idempotency_key()``. ``record_unit=False``: the
    unit's name is not recorded with each call (``App.tool``'s ``carried``), where ``name`` already
    says which unit it is (one framework tool); an operation tool runs several kinds of unit, and
    its recorded unit name is what tells a replay which one each call was."""
    if name in app.tools:
        return

    async def tool_call(**kwargs: Any) -> Any:
        ref = kwargs.get(unit_arg)
        if isinstance(ref, UnitRef) and ref.settled:
            return ref.result
        body = unit_body(ref, "tool", name)
        token = _idempotency_key.set(kwargs.get("idempotency_key"))
        try:
            with errors("tool", name):
                result = await body()
        finally:
            _idempotency_key.reset(token)
        if isinstance(ref, UnitRef):
            ref.settle(result)
        return result

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
        carried=() if record_unit else (unit_arg,),
    )(tool_call)


def tool_args(args: Any, tool: str, unit_arg: str) -> dict[str, Any]:
    """A tool call's arguments as recorded: a JSON object without agentlog's reserved names."""
    recorded = as_json(args, f"tool {tool!r} arguments")
    if not isinstance(recorded, dict):
        raise UnrecordableValue(f"tool {tool!r}: arguments {args!r} are not a JSON object")
    reserved = {unit_arg, "idempotency_key"} & set(recorded)
    if reserved:
        raise TerminalError(f"tool {tool!r}: argument names {sorted(reserved)} are reserved by agentlog")
    return recorded
