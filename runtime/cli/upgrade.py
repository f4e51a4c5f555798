"""``agentlog upgrade check --app MODULE:app [--schemas DIR] [--from-store] [--json]``: the gate to run in CI before a
deploy (runtime.replay.upgrade does the work; this prints it). Exit 1 if a schema is incompatible
or an in-flight run would park under the new code."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.config import Settings
from runtime.log.schemas.catalog import DEFAULT_SCHEMA_DIR

if TYPE_CHECKING:
    from runtime.replay.upgrade import UpgradeReport


def _as_dict(report: UpgradeReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "schemas": [
            {"subject": s.subject, "status": s.status, "detail": list(s.detail)} for s in report.schemas
        ],
        "runs": [
            {
                "run_id": r.run_id,
                "workflow": r.workflow,
                "verdict": r.verdict,
                "detail": r.detail,
                "drift": [
                    {
                        "position": d.position,
                        "model": d.model,
                        "recorded_prompt_version": d.recorded_prompt_version,
                        "issued_prompt_version": d.issued_prompt_version,
                    }
                    for d in r.drift
                ],
            }
            for r in report.runs
        ],
        "unreadable": list(report.skipped),
        "patches_still_needed": {k: list(v) for k, v in report.patches_still_needed().items()},
        "patches_recorded": {k: list(v) for k, v in report.patches_recorded().items()},
    }


def _print(report: UpgradeReport) -> None:
    bad = [s for s in report.schemas if not s.ok]
    if bad:
        for schema in bad:
            print(f"schemas   {schema.subject}: {schema.status}: {'; '.join(schema.detail)}")
    else:
        print(f"schemas   ok ({len(report.schemas)} subjects compatible with the registry)")
    rows = [("run", "workflow", "verdict")] + [(r.run_id, r.workflow, r.detail) for r in report.runs]
    rows += [
        (run_id, "?", "unreadable: a record cannot be decoded or a stored result is missing")
        for run_id in report.skipped
    ]
    run_w = max(len(row[0]) for row in rows)
    wf_w = max(len(row[1]) for row in rows)
    print(f"in flight {len(report.runs) + len(report.skipped)} runs")
    for run_id, workflow, verdict in rows:
        print(f"  {run_id:<{run_w}}  {workflow:<{wf_w}}  {verdict}")
    needed = report.patches_still_needed()
    shown = "; ".join(f"{patch} (old branch kept by {', '.join(runs)})" for patch, runs in needed.items())
    print(f"patches still needed: {shown or 'none'}")
    recorded = report.patches_recorded()
    if recorded:
        taken = "; ".join(
            f"{patch} ({len(runs)} runs took the new branch)" for patch, runs in recorded.items()
        )
        print(f"patches recorded: {taken}")
    print("verdict   ok to deploy" if report.ok else "verdict   NOT safe to deploy")


def _check(args: argparse.Namespace, settings: Settings) -> int:
    from runtime.cli.runs import load_app
    from runtime.log.kafka.backend import KafkaLog
    from runtime.log.schemas.serde import Serde
    from runtime.replay.upgrade import check, store_in_flight

    app = load_app(args.app)
    run_ids = store_in_flight(settings) if args.from_store else None
    log = KafkaLog(settings)
    try:
        report = check(app, settings, log, Serde(settings), args.schemas, run_ids)
    finally:
        log.close()
    if args.json:
        print(json.dumps(_as_dict(report), indent=2))
    else:
        _print(report)
    return 0 if report.ok else 1


def add_upgrade_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    upgrade = subparsers.add_parser("upgrade", help="may new code be deployed with runs in flight?")
    actions = upgrade.add_subparsers(dest="action", required=True)
    sub = actions.add_parser(
        "check",
        help="schemas vs the registry; shadow-replay every in-flight run against --app; exit 1 if one would park",
    )
    sub.add_argument("--app", required=True, help="the new code's App, MODULE:attr")
    sub.add_argument(
        "--schemas",
        type=Path,
        default=DEFAULT_SCHEMA_DIR,
        help="the new schema folder (default: the schemas shipped with agentlog)",
    )
    sub.add_argument(
        "--from-store",
        action="store_true",
        help="take the in-flight runs from the analytics store (AGENTLOG analytics DSN) and read only "
        "their records, instead of scanning the whole events topic",
    )
    sub.add_argument("--json", action="store_true", help="machine-readable output")
    sub.set_defaults(func=_check)
