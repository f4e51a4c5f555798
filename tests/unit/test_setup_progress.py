"""A long set-up step reports how far it is while it runs, and its outcome when it ends."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from infra.progress import StepTimeout, files_under, run_step

pytestmark = pytest.mark.unit


def test_a_step_reports_progress_while_it_runs_and_returns_its_exit_code(tmp_path: Path) -> None:
    lines: list[str] = []
    counts = iter(range(1, 100))
    with (tmp_path / "step.log").open("wb") as log:
        code = run_step(
            [sys.executable, "-c", "import time, sys; print('working'); time.sleep(0.6); sys.exit(3)"],
            what="a slow step",
            progress=lines.append,
            log=log,
            measure=lambda: f"{next(counts)} things",
            every=0.15,
        )
    assert code == 3
    assert len(lines) >= 3, lines
    assert lines[0].startswith("  ... a slow step: ") and lines[0].endswith("1 things")
    assert lines[-1].startswith("  ... a slow step: done in")
    assert "working" in (tmp_path / "step.log").read_text()


def test_a_quick_step_stays_quiet_and_a_stuck_one_is_killed_at_its_deadline(tmp_path: Path) -> None:
    lines: list[str] = []
    with (tmp_path / "step.log").open("wb") as log:
        assert run_step([sys.executable, "-c", "pass"], what="quick", progress=lines.append, log=log) == 0
        with pytest.raises(StepTimeout, match="stuck took more than"):
            run_step(
                [sys.executable, "-c", "import time; time.sleep(30)"],
                what="stuck",
                progress=lines.append,
                log=log,
                timeout=0.3,
                every=5,
            )
    assert lines == []


def test_files_under_counts_matching_files_and_their_bytes(tmp_path: Path) -> None:
    assert files_under(tmp_path / "missing", "*.jar") == (0, 0)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.jar").write_bytes(b"12345")
    (tmp_path / "y.jar").write_bytes(b"1")
    (tmp_path / "z.pom").write_bytes(b"1")
    assert files_under(tmp_path, "*.jar") == (2, 6)
