"""What workers and the coordinator say on the limits topic: coordination, not history.

Nothing reads these records later -- a run's waits are recorded in its own events -- so they are
compact JSON (pydantic), not Avro with a registered schema: a record lives a few lease lengths,
and a worker that meets one it cannot parse (a newer version's) skips it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from runtime.workflow.limits import Dimension


class Item(BaseModel):
    """One worker's view of one dimension of one limit instance."""

    model_config = ConfigDict(frozen=True)

    i: str  # the instance: a limit's name, or name[key]
    l: str  # noqa: E741 -- the limit's name (the coordinator reads its capacity from the app)
    d: Dimension
    w: float  # what it wants: slots in use and waited for; for a rate, its recent use, or all while it waits
    h: float  # what it holds: the share it applies now (and slots still in use beyond it)
    q: bool = False  # calls wait for it here


class Report(BaseModel):
    """A worker's wants and holdings, sent every third of a lease and when they change."""

    kind: Literal["report"] = "report"
    worker: str
    applied: tuple[int, int] | None = None  # the (epoch, seq) of the last grant it applied
    items: list[Item] = Field(default_factory=list)
    leaving: bool = False  # it stopped: it holds nothing and will apply no grant


class Grant(BaseModel):
    """The coordinator's shares for every worker; a worker's absent instance is a share of 0."""

    kind: Literal["grant"] = "grant"
    epoch: int  # partition 0's epoch: a grant from an older coordinator is ignored once a newer is seen
    seq: int
    lease_s: float
    shares: dict[str, list[tuple[str, Dimension, float]]]  # worker -> (instance, dimension, share)

    def order(self) -> tuple[int, int]:
        return (self.epoch, self.seq)


Message = Annotated[Report | Grant, Field(discriminator="kind")]
MESSAGE: TypeAdapter[Report | Grant] = TypeAdapter(Message)


def encode(message: Report | Grant) -> bytes:
    return message.model_dump_json().encode()


def decode(value: bytes) -> Report | Grant:
    return MESSAGE.validate_json(value)
