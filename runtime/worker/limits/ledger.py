"""What the limits topic says each worker may be using: every worker keeps it, from the records it
reads, so that the one that becomes coordinator already knows the outstanding leases.

A worker may be using, of one instance's dimension, the most of: what its last report says it
holds, and every grant it may not have applied yet -- one newer than the last its report says it
applied -- until that grant's lease and margin have run out; and nothing at all once its last
report was read a lease and a margin ago (a worker stops using its shares a lease after its last
acknowledged report). Times are this process's monotonic clock: when the record was read (or, for a
record read while catching up, when it was written, by its timestamp).
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.workflow.limits import Dimension

from .messages import Grant, Report

Key = tuple[str, Dimension]


@dataclass
class _Sent:
    grant: Grant
    at: float
    shares: dict[str, dict[Key, float]]


class Ledger:
    def __init__(self, lease_s: float, margin_s: float) -> None:
        self.lease_s = lease_s
        self.margin_s = margin_s
        self.reports: dict[str, tuple[Report, float, dict[Key, float]]] = {}
        self._grants: dict[tuple[int, int], _Sent] = {}
        self.newest_epoch = -1
        self.last_seq: dict[int, int] = {}  # per epoch, the highest grant number read

    def add_report(self, report: Report, at: float) -> None:
        holds = {(item.i, item.d): item.h for item in report.items}
        self.reports[report.worker] = (report, at, holds)

    def add_grant(self, grant: Grant, at: float) -> None:
        """Count ``grant`` from ``at`` on (a grant already known keeps its earlier time)."""
        self.newest_epoch = max(self.newest_epoch, grant.epoch)
        self.last_seq[grant.epoch] = max(self.last_seq.get(grant.epoch, 0), grant.seq)
        if grant.order() in self._grants:
            return
        shares = {w: {(i, d): v for i, d, v in entries} for w, entries in grant.shares.items()}
        self._grants[grant.order()] = _Sent(grant, at, shares)

    def expire(self, now: float) -> None:
        horizon = now - self.lease_s - self.margin_s
        for order in [o for o, sent in self._grants.items() if sent.at < horizon]:
            del self._grants[order]
        for worker in [w for w, (_, at, _) in self.reports.items() if at < horizon]:
            del self.reports[worker]

    def live(self, now: float) -> dict[str, Report]:
        """The workers that reported within a lease and margin, and have not left."""
        horizon = now - self.lease_s - self.margin_s
        return {w: r for w, (r, at, _) in self.reports.items() if at >= horizon and not r.leaving}

    def bound(self, key: Key, now: float) -> dict[str, float]:
        """What each worker may be using of ``key`` now (workers bound to nothing left out)."""
        horizon = now - self.lease_s - self.margin_s
        bound: dict[str, float] = {}
        applied: dict[str, tuple[int, int] | None] = {}
        for worker, (report, at, holds) in self.reports.items():
            if at < horizon:
                continue
            if report.leaving:
                applied[worker] = (1 << 62, 0)  # it applies no grant any more
                continue
            applied[worker] = report.applied
            if holds.get(key, 0.0) > 0.0:
                bound[worker] = holds[key]
        for order, sent in self._grants.items():
            if sent.at < horizon:
                continue
            for worker, shares in sent.shares.items():
                share = shares.get(key, 0.0)
                if share <= 0.0 or worker not in applied:
                    # a worker uses a share no longer than a lease after its last report: once the
                    # coordinator has read none for a lease and a margin, it uses nothing
                    continue
                seen = applied.get(worker)
                if seen is not None and order <= seen:
                    continue  # superseded by a grant it reported applying
                bound[worker] = max(bound.get(worker, 0.0), share)
        return bound
