"""How the coordinator divides one capacity (one dimension of one limit instance) between workers.

Two steps, both pure:

1. ``fair_targets``: max-min fair shares of the wants. When the wants do not all fit, each worker
   gets its want or the common level, whichever is smaller (water-filling); when they fit, the
   spare is spread evenly on top of every want, so a worker whose traffic grows finds room in its
   own share without asking the coordinator first.
2. ``grants``: what may be granted now without ever promising capacity another worker may still be
   using. ``bound`` is what each worker may be using as far as the coordinator knows (its last
   report, and every grant it may not have applied yet). A cut is granted at once; an increase only
   out of what nobody is bound to, so freed capacity moves only once its holder has reported it
   gave it up (or its lease ran out).

Concurrency slots are whole: both steps then deal in integers, handing remainders out in the
workers' order, which the caller makes stable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

_EPS = 1e-9


def _water_fill(
    capacity: float, wants: Mapping[str, float], whole: bool, order: Sequence[str]
) -> dict[str, float]:
    """Max-min fair shares of ``capacity`` for ``wants`` whose sum exceeds it; whole units left
    over, fewer than the claimants, go one each in ``order``."""
    shares = dict.fromkeys(wants, 0.0)
    left = capacity
    open_ = sorted(wants, key=lambda w: (wants[w], w))
    while open_ and left > _EPS:
        level = left / len(open_)
        if whole:
            level = math.floor(level)
            if level < 1:  # fewer units than claimants: one each, in order
                claimants = set(open_)
                for worker in [w for w in dict.fromkeys([*order, *sorted(open_)]) if w in claimants]:
                    if left < 1:
                        break
                    shares[worker] += 1
                    left -= 1
                break
        smallest = open_[0]
        need = wants[smallest] - shares[smallest]
        if need <= level:  # the smallest want is met whole; the rest share what is left
            shares[smallest] += need
            left -= need
            open_.pop(0)
            continue
        for worker in open_:
            shares[worker] += level
        left -= level * len(open_)
        if not whole:
            break
    return shares


def fair_targets(
    capacity: float, wants: Mapping[str, float], whole: bool, order: Sequence[str] | None = None
) -> dict[str, float]:
    """Each worker's fair share of ``capacity`` given its ``wants`` (see the module's step 1); whole
    units that cannot be split evenly go first to the workers early in ``order`` (default: by name),
    which the coordinator rotates so that no worker is always last."""
    order = sorted(wants) if order is None else [*order, *sorted(set(wants) - set(order))]
    if not wants:
        return {}
    if whole:
        wants = {w: math.ceil(v - _EPS) for w, v in wants.items()}
    total = sum(wants.values())
    if total > capacity + _EPS:
        return _water_fill(capacity, wants, whole, order)
    spare = capacity - total
    workers = [w for w in order if w in wants]
    if not whole:
        return {w: wants[w] + spare / len(workers) for w in workers}
    each, extra = divmod(round(spare), len(workers))
    return {w: wants[w] + each + (1 if i < extra else 0) for i, w in enumerate(workers)}


def grants(
    capacity: float,
    targets: Mapping[str, float],
    bound: Mapping[str, float],
    whole: bool,
    order: Sequence[str] | None = None,
) -> dict[str, float]:
    """What to grant each worker now (see the module's step 2): never more, summed with what the
    others are bound to, than ``capacity``."""
    granted: dict[str, float] = {}
    raises: dict[str, float] = {}
    for worker, target in targets.items():
        held = bound.get(worker, 0.0)
        if target <= held + _EPS:
            granted[worker] = target  # a cut (or no change): the holder applies it first
        else:
            granted[worker] = held
            raises[worker] = target - held
    # Cuts are not yet applied: until their holders report them, they stay bound at the old share.
    free = capacity - sum(bound.values())
    if whole:
        free = math.floor(free + _EPS)
    if free <= _EPS or not raises:
        return granted
    if sum(raises.values()) <= free + _EPS:
        portions = dict(raises)
    else:
        portions = _water_fill(free, raises, whole, order or ())
    for worker, portion in portions.items():
        granted[worker] += portion
    return granted
