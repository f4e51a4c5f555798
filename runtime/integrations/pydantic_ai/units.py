"""What a PydanticAI unit records, and how its failures read as agentlog's.

The units themselves travel as ``runtime.integrations.calls.UnitRef``s; this module shapes their
inputs (messages, request parameters) and results (the ``ModelResponse`` with its usage) and maps
PydanticAI's exceptions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from pydantic_ai import exceptions as pai_errors
from pydantic_core import PydanticSerializationError

from runtime.errors import TerminalError
from runtime.integrations.calls import ModelResult, UnrecordableValue, as_json
from runtime.integrations.pydantic_ai.compact import compact_message, compact_response
from runtime.integrations.pydantic_ai.message_forms import Forms, MessageForms
from runtime.integrations.pydantic_ai.parameter_forms import ParameterForms
from runtime.models.errors import status_error
from runtime.workflow.earlier_form import Messages

# The argument (tool calls) or parameter (model calls) that carries the unit's body.
UNIT_ARG = "pydantic_ai_unit"


def recorded_messages(messages: Any, forms: MessageForms | None = None) -> Messages:
    """The model request's messages as recorded: PydanticAI's JSON shape, compact
    (runtime.integrations.pydantic_ai.compact), without the timestamps that requests take from the
    clock when the agent builds them (a replayed agent builds them again at another time; the
    responses' timestamps come from the log and are kept). Runs recorded before messages were
    compact recorded the full form: replay accepts its hash too (runtime.workflow.earlier_form).
    ``forms``: the agent run's messages turned already (runtime.integrations.pydantic_ai.message_forms)."""
    if forms is not None and isinstance(messages, list):
        turned = forms.forms(messages, _turned)
        return Messages(
            [form for form, _, _ in turned],
            earlier=lambda: [before for _, before, _ in turned],
            encoded=[encoded for _, _, encoded in turned],
            transcript=forms.transcript,
        )
    dumped = as_json(messages, "model request messages")
    return Messages(
        [_without_request_timestamps(compact_message(message)) for message in dumped],
        earlier=lambda: [_without_request_timestamps(message) for message in dumped],
    )


def _turned(message: Any) -> Forms:
    dumped = as_json(message, "a model request message")
    form = _without_request_timestamps(compact_message(dumped))
    text = orjson.dumps(form, option=orjson.OPT_SORT_KEYS)
    return form, _without_request_timestamps(dumped), (text, hashlib.sha256(text).digest())


def recorded_parameters(parameters: Any, what: str, forms: ParameterForms | None = None) -> Any:
    """The request parameters as recorded (tool definitions, output schema ...): the public fields
    only, not PydanticAI's private bookkeeping (telemetry ids and such). ``forms``: the agent run's
    parameters dumped already (runtime.integrations.pydantic_ai.parameter_forms)."""
    if forms is not None:
        return forms.recorded(parameters, what, _dumped_parameters)
    return _dumped_parameters(parameters, what)


def _dumped_parameters(parameters: Any, what: str) -> Any:
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


@contextmanager
def mapped_errors(kind: str, name: str) -> Iterator[None]:
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


def recorded_response(response: Any) -> ModelResult:
    """A ``ModelResponse`` (as JSON, recorded compact: runtime.integrations.pydantic_ai.compact)
    with its usage and model name beside it, where the worker reads them."""
    if not isinstance(response, dict):
        return ModelResult(response, {}, None)
    usage = response.get("usage") or {}
    shown = {
        "input_tokens": usage.get("input_tokens"),
        "output_tokens": usage.get("output_tokens"),
        "cached_tokens": usage.get("cache_read_tokens"),
    }
    model = response.get("model_name")
    return ModelResult(
        compact_response(response),
        {k: v for k, v in shown.items() if isinstance(v, int)},
        model if isinstance(model, str) else None,
        short=True,  # the usage and model said once, by the record's fields
    )
