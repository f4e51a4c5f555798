"""Every exception class the runtime package defines derives from AgentlogError (one root: a caller
catches agentlog's errors, and the CLI prints them on one line, without listing them)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import runtime
from runtime.errors import AgentlogError

pytestmark = pytest.mark.unit

# Not errors, or not ours to move yet -- each with its reason.
EXEMPT = {
    # A BaseException control-flow signal (like StopIteration): ends a run and starts the next.
    "runtime.workflow.context.ContinueAsNew",
    # Likewise: the end of a run's compensations, carrying the event the run ends with.
    "runtime.workflow.compensation.Unwound",
    # Raised at a workflow's await when its run is cancelled: like asyncio.CancelledError, a
    # BaseException so that workflow code's ``except Exception`` does not swallow the cancel.
    "runtime.workflow.cancellation.RunCancelledError",
}


def _runtime_modules() -> list[str]:
    names = [runtime.__name__]
    for info in pkgutil.walk_packages(runtime.__path__, prefix="runtime."):
        if info.name.rsplit(".", 1)[-1] != "__main__":  # running it is its only job
            names.append(info.name)
    return names


def _exception_classes() -> list[type[BaseException]]:
    found = []
    for name in _runtime_modules():
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if value.__module__ == name and issubclass(value, BaseException):
                found.append(value)
    return found


def test_the_walk_finds_the_exceptions() -> None:
    names = {f"{cls.__module__}.{cls.__qualname__}" for cls in _exception_classes()}
    assert {
        "runtime.config.ConfigError",
        "runtime.errors.CallFailed",
        "runtime.log.schemas.catalog.SchemaFileError",
        "runtime.log.records.payloads.PayloadMissing",
        "runtime.workflow.app.RegistrationError",
    } <= names


def test_every_runtime_exception_derives_from_agentlog_error() -> None:
    strays = [
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in _exception_classes()
        if not issubclass(cls, AgentlogError) and f"{cls.__module__}.{cls.__qualname__}" not in EXEMPT
    ]
    assert strays == []


def test_config_error_is_still_a_value_error() -> None:
    from runtime.config import ConfigError

    assert issubclass(ConfigError, ValueError) and issubclass(ConfigError, AgentlogError)
