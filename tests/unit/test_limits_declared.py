"""Limits declared on the app and overridden per deployment: what is refused at start, naming the
setting, and what the worker then enforces (runtime.workflow.declared_limits, runtime.config)."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.config import LIMIT_DIMENSIONS, ConfigError, Settings, load_settings
from runtime.log.port.memory import MemoryLog
from runtime.log.schemas.serde import Serde
from runtime.worker.loop import Worker
from runtime.workflow.app import App, RegistrationError
from runtime.workflow.declared_limits import LimitError, resolve_limits, run_limit_keys
from runtime.workflow.limits import DIMENSIONS

pytestmark = pytest.mark.unit


def app_with(**limit: Any) -> App:
    app = App("t")

    @app.model("gpt")
    def gpt(messages: Any, **params: Any) -> Any:
        return {}

    @app.tool("pay")
    def pay(amount: int) -> int:
        return amount

    if limit:
        app.limit("openai", **limit)
    return app


def test_config_knows_the_dimensions_of_a_limit() -> None:
    assert LIMIT_DIMENSIONS == DIMENSIONS


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        ({"models": ["gpt"], "requests_per_minute": 0}, "requests_per_minute must be greater than 0"),
        ({"models": ["gpt"], "requests_per_minute": -5}, "requests_per_minute must be greater than 0"),
        ({"tools": ["pay"], "concurrent": 0}, "concurrent must be greater than 0"),
        ({"tools": ["pay"], "concurrent": 2.5}, "concurrent must be a whole number"),
        ({"models": ["gpt"]}, "no capacity given"),
        ({"requests_per_minute": 10}, "names no model and no tool"),
        ({"models": ["gpt"], "tokens_per_minute": 500}, "smaller than one request"),
        ({"tools": ["pay"], "tokens_per_minute": 50_000}, "tokens_per_minute counts model tokens"),
        ({"models": ["gpt"], "requests_per_minute": float("nan")}, "must be greater than 0"),
    ],
)
def test_a_limit_that_cannot_hold_is_refused_where_it_is_declared(
    limit: dict[str, Any], message: str
) -> None:
    with pytest.raises(LimitError, match=message) as raised:
        app_with(**limit)
    assert "app.limit('openai')" in str(raised.value)


def test_a_limit_declared_twice_is_refused() -> None:
    app = app_with(models=["gpt"], requests_per_minute=60)
    with pytest.raises(RegistrationError, match="limit 'openai' is declared twice"):
        app.limit("openai", models=["gpt"], concurrent=1)


def test_an_unknown_model_or_tool_is_refused_when_the_worker_starts() -> None:
    app = app_with(models=["gpt", "claude"], requests_per_minute=60)
    with pytest.raises(LimitError, match="names model 'claude', which the app does not register"):
        resolve_limits(app.limits, app.models, app.tools, {})
    tools = app_with(tools=["charge"], concurrent=5)
    with pytest.raises(LimitError, match="names tool 'charge'"):
        resolve_limits(tools.limits, tools.models, tools.tools, {})


def test_the_worker_refuses_to_start_naming_the_setting() -> None:
    app = app_with(models=["gpt"], requests_per_minute=60)
    settings = Settings(partitions=1, limits={"anthropic": {"requests_per_minute": 10}})
    log = MemoryLog(settings)
    with pytest.raises(
        LimitError,
        match=r"setting limits\.anthropic: the app declares no limit 'anthropic' \(declared: openai\)",
    ):
        Worker(app, settings, log=log, serde=Serde.offline(settings), worker_id="w")


def test_an_override_replaces_the_declared_capacity() -> None:
    app = app_with(models=["gpt"], requests_per_minute=60, tokens_per_minute=20_000)
    resolved = resolve_limits(app.limits, app.models, app.tools, {"openai": {"requests_per_minute": 500}})
    assert resolved["openai"].requests_per_minute == 500
    assert resolved["openai"].tokens_per_minute == 20_000  # what it does not name stays declared
    slots = app_with(tools=["pay"], concurrent=5)
    assert (
        resolve_limits(slots.limits, slots.models, slots.tools, {"openai": {"concurrent": 2.0}})[
            "openai"
        ].concurrent
        == 2
    )


def test_an_override_may_add_a_dimension_but_must_still_hold() -> None:
    app = app_with(models=["gpt"], requests_per_minute=60)
    added = resolve_limits(app.limits, app.models, app.tools, {"openai": {"concurrent": 3}})
    assert added["openai"].concurrent == 3
    with pytest.raises(
        LimitError, match=r"setting limits\.openai over app\.limit\('openai'\).*smaller than one request"
    ):
        resolve_limits(app.limits, app.models, app.tools, {"openai": {"tokens_per_minute": 100}})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            '{"openai": {"requests_per_minute": 0}}',
            r"limits\.openai\.requests_per_minute must be greater than 0",
        ),
        ('{"openai": {"requests_per_minute": -1}}', "must be greater than 0"),
        ('{"openai": {"rpm": 10}}', r"limits\.openai: 'rpm' is not a dimension"),
        ('{"openai": {"concurrent": 1.5}}', "must be a whole number"),
        ('{"openai": 5}', "limits"),
        ("not json", "AGENTLOG_LIMITS must be a JSON object"),
    ],
)
def test_a_bad_override_is_refused_when_settings_load_naming_it(
    monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    """The client loads the same settings: it refuses them too, before it writes anything."""
    monkeypatch.setenv("AGENTLOG_LIMITS", value)
    with pytest.raises(ConfigError, match=message):
        load_settings()


def test_the_environment_overrides_limits_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLOG_LIMITS", '{"openai": {"requests_per_minute": 120, "concurrent": 4}}')
    assert load_settings().limits == {"openai": {"requests_per_minute": 120, "concurrent": 4}}


def test_a_keyed_limit_takes_its_key_from_the_runs_input() -> None:
    app = app_with(models=["gpt"], requests_per_minute=60, per="tenant")
    assert run_limit_keys(app.limits, {"tenant": "acme", "x": 1}) == (("openai", "acme"),)
    assert run_limit_keys(app.limits, {"tenant": 42}) == (("openai", "42"),)
    assert run_limit_keys(app.limits, {"x": 1}) == ()  # no such field: the unkeyed instance
    assert run_limit_keys(app.limits, "a plain string input") == ()
