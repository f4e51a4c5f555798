"""The CLI ends any AgentlogError with one line, ``agentlog: <message>``, and no traceback -- from a
handler, from loading a package's commands, from the configuration -- and imports only the
registrar of the chosen subcommand."""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import EntryPoint
from typing import Any

import pytest

from runtime.config import Settings
from runtime.errors import AgentlogError, TerminalError

pytestmark = pytest.mark.unit

# By import_module: the package runtime.cli exports its main() under the module's name.
cli = importlib.import_module("runtime.cli.main")

LOADED: list[str] = []


class BoomError(TerminalError):
    """A subclass two levels under the root, with a message on several lines."""


def _boom(args: argparse.Namespace, settings: Settings) -> int:
    raise BoomError("the first line\n  and the second")


def _ok(args: argparse.Namespace, settings: Settings) -> int:
    return 0


def add_boom(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    LOADED.append("boom")
    subparsers.add_parser("boom").set_defaults(func=_boom)


def add_fine(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    LOADED.append("fine")
    subparsers.add_parser("fine").set_defaults(func=_ok)


ENTRY_POINTS = [
    EntryPoint("boom", f"{__name__}:add_boom", cli.COMMANDS_GROUP),
    EntryPoint("fine", f"{__name__}:add_fine", cli.COMMANDS_GROUP),
    EntryPoint("broken", "agentlog_no_such_package.cli:add", cli.COMMANDS_GROUP),
]


@pytest.fixture(autouse=True)
def fake_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    def entry_points(group: str, name: str | None = None) -> list[EntryPoint]:
        return [e for e in ENTRY_POINTS if e.group == group and (name is None or e.name == name)]

    monkeypatch.setattr(cli, "entry_points", entry_points)
    monkeypatch.delenv("AGENTLOG_BOOTSTRAP_SEVERS", raising=False)
    LOADED.clear()


def _stderr_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_a_handler_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["boom"]) == 1
    assert _stderr_lines(capsys) == ["agentlog: the first line; and the second"]


def test_a_configuration_error_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLOG_BOOTSTRAP_SEVERS", "x")
    assert cli.main(["fine"]) == 2
    (line,) = _stderr_lines(capsys)
    assert line.startswith("agentlog: configuration error:") and "AGENTLOG_BOOTSTRAP_SEVERS" in line


def test_a_command_that_cannot_be_imported_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["broken"]) == 1
    (line,) = _stderr_lines(capsys)
    assert (
        line.startswith("agentlog: cannot load the 'broken' command") and "agentlog_no_such_package" in line
    )


def test_only_the_chosen_subcommand_is_imported(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--partitions", "3", "fine"]) == 0
    assert LOADED == ["fine"]


def test_help_lists_every_command_that_loads_and_names_the_one_that_does_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    captured = capsys.readouterr()
    assert LOADED == ["boom", "fine"]
    assert "boom" in captured.out and "fine" in captured.out
    (line,) = captured.err.splitlines()
    assert line.startswith("agentlog: cannot load the 'broken' command")


def test_every_agentlog_error_is_caught(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def raise_root(args: Any, settings: Any) -> int:
        raise AgentlogError("")

    monkeypatch.setattr(sys.modules[__name__], "_boom", raise_root)
    assert cli.main(["boom"]) == 1
    assert _stderr_lines(capsys) == ["agentlog: AgentlogError"]


def test_no_installed_commands_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "entry_points", lambda group, name=None: [])
    assert cli.main(["audit"]) == 1
    (line,) = _stderr_lines(capsys)
    assert line.startswith("agentlog: no commands in the 'agentlog.commands' entry-point group")


def test_runtimes_own_commands_load_without_reading_the_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarted worker's `agentlog worker` finds its registrar without importlib.metadata."""

    def unread(group: str, name: str | None = None) -> list[EntryPoint]:
        raise AssertionError(f"entry points read for {name!r}")

    monkeypatch.setattr(cli, "entry_points", unread)
    (registrar,) = cli._registrars(["--partitions", "3", "worker", "--app", "x:y"])
    assert registrar.__module__ == "runtime.cli.runs"


def test_runtimes_own_commands_are_the_ones_pyproject_lists() -> None:
    """OWN_COMMANDS and pyproject.toml's entry points of runtime.* agree (the listing of --help
    and any other package's tooling read the entry points)."""
    import tomllib

    from support.services import ROOT

    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][cli.COMMANDS_GROUP]
    assert {name: value for name, value in listed.items() if value.startswith("runtime.")} == cli.OWN_COMMANDS
