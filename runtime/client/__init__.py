"""Submitting and following runs from a program; the CLI is a thin layer over this.

``Client`` submits runs and hands out a ``RunHandle`` per run (``client.run(run_id)``, or what
``submit`` returns): ``result``, ``status``, ``signal``, ``cancel``, ``history``, ``reset``,
``fork`` and the rest. By job: ``commands`` (writing commands), ``reading`` (reading a run),
``endings`` (waiting for runs to end), ``resets`` (the submission of a reset or fork),
``handle`` and ``client``.
"""

from runtime.client.client import Client
from runtime.client.commands import new_run_id
from runtime.client.endings import ForgedRecord, RunError
from runtime.client.handle import RunHandle
from runtime.client.queries import QueryError
from runtime.client.streaming import UnknownRun
from runtime.log.records.stream import StreamEvent
from runtime.run_status import LoggedEvent, RunStatus, summarize

__all__ = [
    "Client",
    "ForgedRecord",
    "LoggedEvent",
    "QueryError",
    "RunError",
    "RunHandle",
    "RunStatus",
    "StreamEvent",
    "UnknownRun",
    "new_run_id",
    "summarize",
]
