"""The change a what-if tries, as the command line names it, and the check that the selected runs can take it.

``--prompt MODEL=TEXT`` (or ``MODEL=@file``) replaces the system prompt of every call of model MODEL;
``--model OLD=NEW`` makes every call of model OLD a call of NEW; ``--app module:app`` runs a new
version of the code. A change is refused before any fork starts when it names a model the selected
runs never called, a model the new code does not register, or a workflow the new code lacks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runtime.errors import AgentlogError
from runtime.log.records.events import Event, ModelCallScheduled
from runtime.workflow.app import App
from runtime.workflow.whatif_change import WhatifChange


class ChangeError(AgentlogError):
    """A what-if change that is malformed or that the selected runs cannot take; the message names it."""


@dataclass(frozen=True)
class Change:
    """What a what-if changes, before it has an id."""

    models: dict[str, str] = field(default_factory=dict)
    prompts: dict[str, str] = field(default_factory=dict)
    app: str | None = None

    def describe(self) -> str:
        parts = [f"model {old} -> {new}" for old, new in sorted(self.models.items())]
        parts += [
            f"prompt of {model} ({len(text)} characters)" for model, text in sorted(self.prompts.items())
        ]
        if self.app is not None:
            parts.append(f"code {self.app}")
        return "; ".join(parts)

    def for_run(self, whatif_id: str, index: int, plan: Sequence[str] = ()) -> WhatifChange:
        return WhatifChange(whatif_id, dict(self.models), dict(self.prompts), self.app, index, tuple(plan))

    @classmethod
    def of(cls, recorded: WhatifChange) -> Change:
        return cls(dict(recorded.models), dict(recorded.prompts), recorded.app)

    def fork_position(self, history: Sequence[Event]) -> int | None:
        """Where a run's fork starts: at the first model call the change touches; at the start for
        new code; None when the change touches none of the run's calls (nothing to replay)."""
        if self.app is not None:
            return 1
        touched = WhatifChange("", self.models, self.prompts)
        return next(
            (e.position for e in history if isinstance(e, ModelCallScheduled) and touched.touches(e.model)),
            None,
        )


def _pair(option: str, spec: str) -> tuple[str, str]:
    name, sep, value = spec.partition("=")
    if not sep or not name.strip() or not value:
        raise ChangeError(f"{option} must look like NAME=VALUE, got {spec!r}")
    return name.strip(), value


def parse_change(prompts: Sequence[str], models: Sequence[str], app: str | None) -> Change:
    """The change of ``--prompt`` (MODEL=TEXT or MODEL=@file), ``--model`` (OLD=NEW) and ``--app``
    options; ChangeError if one is malformed, a file cannot be read, a model is named twice, or
    nothing changes."""
    new_prompts: dict[str, str] = {}
    for spec in prompts:
        model, text = _pair("--prompt", spec)
        if text.startswith("@"):
            try:
                text = Path(text[1:]).read_text(encoding="utf-8")
            except OSError as error:
                raise ChangeError(f"--prompt {model}=@{text[1:]}: cannot read the file: {error}") from error
        if model in new_prompts:
            raise ChangeError(f"--prompt names model {model!r} twice")
        new_prompts[model] = text
    new_models: dict[str, str] = {}
    for spec in models:
        old, new = _pair("--model", spec)
        if old in new_models:
            raise ChangeError(f"--model names model {old!r} twice")
        if old == new.strip():
            raise ChangeError(f"--model {spec}: the same model on both sides changes nothing")
        new_models[old] = new.strip()
    if not new_prompts and not new_models and app is None:
        raise ChangeError("nothing to change: give --prompt MODEL=TEXT, --model OLD=NEW or --app module:app")
    return Change(new_models, new_prompts, app)


def check_change(change: Change, histories: Mapping[str, Sequence[Event]]) -> None:
    """Raise ChangeError if ``change`` names a model none of the runs of ``histories`` called."""
    called = {e.model for events in histories.values() for e in events if isinstance(e, ModelCallScheduled)}
    never = sorted((set(change.models) | set(change.prompts)) - called)
    if never:
        raise ChangeError(
            f"the selected runs never called model {', '.join(repr(m) for m in never)} "
            f"(they called: {', '.join(sorted(called)) or 'no model'}); nothing to change"
        )


def check_app(change: Change, app: App, workflows: Mapping[str, str]) -> None:
    """Raise ChangeError if the code ``app`` (the ``--app`` of the change, or the deployment's
    code a model change is checked against) lacks a workflow of the runs or a model the change
    calls instead."""
    missing = sorted(set(workflows.values()) - set(app.workflows))
    if missing:
        raise ChangeError(
            f"the code {change.app or 'the workers run'} does not register workflow "
            f"{', '.join(repr(w) for w in missing)} that the selected runs used "
            f"(it registers: {', '.join(sorted(app.workflows)) or 'none'})"
        )
    check_models(change, app)


def check_models(change: Change, app: App | None) -> None:
    """Raise ChangeError if ``--model OLD=NEW`` names a NEW that ``app`` does not register (the
    ``--app`` code, else the code the workers run), naming the models it does; or if there is no
    code to check it against (workers do not advertise their models: a fork calling a model they
    lack would fail mid-run, after the what-if started)."""
    if not change.models:
        return
    if app is None:
        raise ChangeError(
            "--model OLD=NEW needs the code to check NEW against: --workers-app module:app "
            "(the --app the workers run), or --app for new code"
        )
    unknown = sorted(set(change.models.values()) - set(app.models))
    if unknown:
        raise ChangeError(
            f"--model names model {', '.join(repr(m) for m in unknown)} that the code "
            f"{change.app or 'the workers run'} does not register "
            f"(it registers: {', '.join(sorted(app.models)) or 'none'})"
        )
