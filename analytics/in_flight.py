"""The ``agentlog.in_flight_runs`` provider: the runs the store lists as running, for
``agentlog upgrade check --from-store`` (runtime cannot import analytics, so it asks through the
entry-point group). Reached as ``agentlog audit`` reaches the store: ``settings.analytics_dsn``, the
embedded store opened directly or, while a sink holds it, through the sink's local proxy."""

from __future__ import annotations

from runtime.config import Settings

from .store import QueryStore, connect
from .tables import DATABASE


def running_run_ids(store: QueryStore) -> list[str]:
    """Ids of the runs in status 'running' in the store's ``runs`` view (non-fenced rows only)."""
    result = store.query(
        f"SELECT run_id FROM {DATABASE}.runs WHERE status = {{status:String}} ORDER BY run_id",
        {"status": "running"},
    )
    return [str(row["run_id"]) for row in result.dicts()]


def in_flight_runs(settings: Settings) -> list[str]:
    """The entry point: ``(settings) -> run ids``; a StoreError if the store cannot be reached."""
    with connect(settings.analytics_dsn) as store:
        return running_run_ids(store)
