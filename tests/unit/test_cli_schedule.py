"""``agentlog schedule add`` refuses a bad schedule at once, with the reason and exit 1, before it
connects to anything (nothing listens at the bootstrap address these runs are given)."""

from __future__ import annotations

import pytest

from runtime.cli.main import main

pytestmark = pytest.mark.unit

NOWHERE = ["--bootstrap-servers", "127.0.0.1:1", "schedule", "add", "s"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--cron", "0 25 * * *", "--workflow", "short"], "cron expression '0 25 * * *' does not parse"),
        (["--cron", "0 9 * *", "--workflow", "short"], "expected 5 fields"),
        (
            ["--cron", "0 9 * * 1-5", "--timezone", "Europe/Pariss", "--workflow", "short"],
            "unknown time zone 'Europe/Pariss'",
        ),
        (["--every", "2x", "--workflow", "short"], "interval '2x'"),
        (["--every", "2s", "--workflow", "short", "--input", "{nope"], "--input is not JSON"),
        (
            ["--every", "2s", "--workflow", "nope", "--app", "support.agent_apps:app"],
            "unknown workflow 'nope' (registered: ",
        ),
        (
            [
                "--every",
                "2s",
                "--workflow",
                "typed",
                "--input",
                '{"id": "x"}',
                "--app",
                "support.agent_apps:app",
            ],
            "input of workflow 'typed' has the wrong shape",
        ),
    ],
)
def test_a_bad_schedule_is_refused_with_the_reason(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*NOWHERE, *args]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("agentlog: ") and says in err, err


def test_cron_and_every_together_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*NOWHERE, "--cron", "@daily", "--every", "2s", "--workflow", "short"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
