"""What a what-if run changes (``agentlog whatif``, runtime.whatif), as its ``RunStarted`` records it.

A what-if run is a fork of a recorded run (effects dry) that carries its change in
``RunStarted.whatif_change``: model calls renamed (``--model OLD=NEW``), a model's system prompt
replaced (``--prompt MODEL=TEXT``), or a new code version (``--app``, which the worker resolves, not
the run). The run applies a model or prompt change as its code issues each model call, from the
fork position on: before it the fork replays the original's history, issued without the change.
The change travels in the record, so a takeover or a wake from the cache applies the same one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from runtime.errors import TerminalError


class WhatifChangeError(TerminalError, ValueError):
    """A what-if change that cannot be read; the message says which part and why."""


@dataclass(frozen=True)
class WhatifChange:
    """One what-if's change, and where this run stands in it."""

    whatif_id: str
    models: dict[str, str] = field(default_factory=dict)  # model name as issued -> the name to call
    prompts: dict[str, str] = field(default_factory=dict)  # model name as issued -> its new system text
    app: str | None = None  # module:app of the code version the what-if runs (None: the deployment's)
    index: int = 0  # this run's place in the what-if's plan
    # On the what-if's first run only: every selected run, so an interrupted what-if can be
    # resumed or reported from the log alone (runtime.whatif.state).
    plan: tuple[str, ...] = ()

    def applied(self, name: str, messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
        """The model name and messages a call of model ``name`` is made with under this change:
        its system message replaced (or put first when it has none) if the change names a prompt
        for ``name``, then the model renamed if the change names one."""
        text = self.prompts.get(name)
        if text is not None:
            rest = [m for m in messages if m.get("role") != "system"]
            kept = next((m for m in messages if m.get("role") == "system"), {"role": "system"})
            messages = [{**kept, "content": text}, *rest]
        return self.models.get(name, name), messages

    def touches(self, model: str) -> bool:
        """Whether a call of ``model`` is made differently under this change."""
        return model in self.models or model in self.prompts

    def to_json(self) -> str:
        body: dict[str, Any] = {"id": self.whatif_id, "index": self.index}
        if self.models:
            body["models"] = self.models
        if self.prompts:
            body["prompts"] = self.prompts
        if self.app is not None:
            body["app"] = self.app
        if self.plan:
            body["plan"] = list(self.plan)
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> WhatifChange:
        try:
            body = json.loads(text)
        except json.JSONDecodeError as error:
            raise WhatifChangeError(f"a what-if change is not JSON: {error}") from error
        if not isinstance(body, dict) or not isinstance(body.get("id"), str):
            raise WhatifChangeError(f"a what-if change must be a JSON object with an id: {text[:200]}")
        models, prompts, plan = body.get("models", {}), body.get("prompts", {}), body.get("plan", [])
        if not _names(models) or not _names(prompts):
            raise WhatifChangeError(f"a what-if change's models and prompts map names to text: {text[:200]}")
        if not isinstance(plan, list) or not all(isinstance(r, str) for r in plan):
            raise WhatifChangeError(f"a what-if change's plan is a list of run ids: {text[:200]}")
        app, index = body.get("app"), body.get("index", 0)
        if (app is not None and not isinstance(app, str)) or not isinstance(index, int):
            raise WhatifChangeError(f"a what-if change's app is text and its index a number: {text[:200]}")
        return cls(body["id"], dict(models), dict(prompts), app, index, tuple(plan))


def _names(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )
