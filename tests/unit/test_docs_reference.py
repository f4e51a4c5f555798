"""tools/docs_reference.py: the reference pages generated from the CLI's parsers and the settings model."""

from __future__ import annotations

import argparse

import pytest

from runtime.cli.main import build_parser
from tools.docs_reference import CLI_MARKER, SETTINGS_MARKER, cli_markdown, render, undocumented_settings

pytestmark = pytest.mark.unit


def test_every_setting_says_what_it_means() -> None:
    # A new field of runtime.config.Settings needs Field(description=...): the settings page shows it.
    assert undocumented_settings() == []


def _command_paths(parser: argparse.ArgumentParser, path: str) -> list[str]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [f"{path} {name}", *_command_paths(sub, f"{path} {name}")]
    return found


def test_every_command_and_option_has_a_section() -> None:
    page = cli_markdown()
    commands = _command_paths(build_parser(), "agentlog")
    assert len(commands) > 30
    for command in commands:
        assert f" {command}\n" in page, command
    assert "`--allow-in-doubt`" in page


def test_the_markers_are_replaced() -> None:
    page = render(f"# CLI\n\n{CLI_MARKER}\n\n# Settings\n\n{SETTINGS_MARKER}\n")
    assert CLI_MARKER not in page and SETTINGS_MARKER not in page
    assert "`AGENTLOG_BOOTSTRAP_SERVERS`" in page
