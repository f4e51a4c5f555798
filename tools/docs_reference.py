"""The reference pages generated from the code: the CLI from its argparse parsers, the settings from
the pydantic model. tools/mkdocs_hooks.py puts them into docs/reference/*.md when the site is built,
so a new flag or setting shows up without anyone editing a page, and a setting without a
description fails tests/unit/test_docs_reference.py."""

from __future__ import annotations

import argparse
import html
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from pydantic.fields import FieldInfo

from runtime.cli.main import build_parser
from runtime.config import ENV_PREFIX, Settings

CLI_MARKER = "<!-- generated: cli -->"
SETTINGS_MARKER = "<!-- generated: settings -->"
STORE_MARKER = "<!-- generated: store -->"


def _cell(text: str) -> str:
    """Text safe in a markdown table cell: no pipes, no newlines, no bare HTML."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand of ``parser``, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    for name, summary, sub in _subparsers(parser):
        yield (*path, name), summary, sub
        yield from _commands(sub, (*path, name))


def _argument_rows(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        name = ", ".join(f"`{flag}`" for flag in action.option_strings) or f"`{action.metavar or action.dest}`"
        if action.option_strings and action.nargs != 0:
            name += f" `{action.metavar or action.dest.upper()}`"
        meaning = formatter._expand_help(action) if action.help else ""
        default = ""
        if action.option_strings and action.nargs != 0 and action.default not in (None, argparse.SUPPRESS):
            default = f"`{action.default}`"
        rows.append(f"| {name} | {_cell(meaning)} | {default} |")
    return rows


def cli_markdown() -> str:
    """Every ``agentlog`` command: its usage, what it does and a table of its arguments."""
    root = build_parser()
    sections = [
        "## agentlog",
        "",
        _cell(root.description or ""),
        "",
        "Options of every command (before the subcommand):",
        "",
        "| argument | meaning | default |",
        "| --- | --- | --- |",
        *_argument_rows(root),
    ]
    for path, summary, parser in _commands(root, ("agentlog",)):
        heading = "#" * min(len(path), 4)
        sections += ["", f"{heading} {' '.join(path)}", ""]
        if summary or parser.description:
            sections += [_cell(parser.description or summary), ""]
        sections += ["```text", parser.format_usage().strip(), "```"]
        rows = _argument_rows(parser)
        if rows:
            sections += ["", "| argument | meaning | default |", "| --- | --- | --- |", *rows]
    return "\n".join(sections) + "\n"


def _default(field: FieldInfo) -> str:
    factory = field.default_factory
    if isinstance(factory, type):  # dict, list: the empty value itself
        return f"`{factory()}`"
    if factory is not None:  # a function: its docstring says what it computes
        return (factory.__doc__ or "").strip() or "computed when the settings are built"
    value: Any = field.default
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, int) and not isinstance(value, bool) and value >= 10_000:
        return f"`{value}` ({value:,})"
    return f"`{value}`"


def _type(field: FieldInfo) -> str:
    annotation = field.annotation
    name = getattr(annotation, "__name__", None) if annotation is not None else None
    if name and not getattr(annotation, "__args__", None):
        return name
    return str(annotation).replace("typing.", "")


def settings_markdown() -> str:
    """One row per field of ``runtime.config.Settings``: name, variable, type, default, meaning."""
    rows = [
        "| setting, environment variable | type | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for name, field in Settings.model_fields.items():
        rows.append(
            f"| `{name}`<br>`{ENV_PREFIX}{name.upper()}` | {_cell(_type(field))} | {_cell(_default(field))} "
            f"| {_cell(field.description or '')} |"
        )
    return "\n".join(rows) + "\n"


def undocumented_settings() -> list[str]:
    """Settings whose field has no description: the settings page would leave their meaning blank."""
    return [name for name, field in Settings.model_fields.items() if not (field.description or "").strip()]


class CookbookError(Exception):
    """A SQL block of a page does not run against the store the migrations make."""


def sql_blocks(markdown: str) -> list[str]:
    """The ```sql blocks of a page."""
    return re.findall(r"^```sql\n(.+?)^```", markdown, flags=re.M | re.S)


def store_markdown(check_sql: Sequence[str] = ()) -> str:
    """Every table and view of the analytics store with its columns and their types, as the
    migrations leave a fresh embedded store (analytics/migrations/ is the truth; this asks it).
    Each statement of ``check_sql`` is run against that store first (an empty store: it must be
    valid and answer nothing), so the page's cookbook cannot name a column that does not exist."""
    import tempfile

    from analytics.migrations import migrate
    from analytics.store import open_client, parse_dsn
    from analytics.tables import DATABASE

    sections = []
    with tempfile.TemporaryDirectory(prefix="agentlog-docs-") as folder:
        client = open_client(parse_dsn(f"chdb://{folder}/store"))
        try:
            migrate(client)
            for sql in check_sql:
                try:
                    client.query(sql)
                except Exception as error:  # any refusal: the build must stop, naming the statement
                    raise CookbookError(f"this SQL block does not run on a migrated store: {error}\n{sql}") from error
            tables = client.query(
                "SELECT name, engine FROM system.tables WHERE database = {db:String} ORDER BY name",
                parameters={"db": DATABASE},
            ).result_rows
            for name, engine in tables:
                columns = client.query(
                    "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = {t:String} "
                    "ORDER BY position",
                    parameters={"db": DATABASE, "t": name},
                ).result_rows
                kind = "view" if engine == "View" else f"table ({engine})"
                listed = ", ".join(f"`{column}` {_cell(str(type_))}" for column, type_ in columns)
                sections.append(f"| `{name}` | {kind} | {listed or 'parameterized: see above'} |")
        finally:
            client.close()
    return "\n".join(["| name | kind | columns (type) |", "| --- | --- | --- |", *sections]) + "\n"


def render(markdown: str) -> str:
    """The page with each generation marker replaced by what it stands for."""
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_markdown())
    if SETTINGS_MARKER in markdown:
        markdown = markdown.replace(SETTINGS_MARKER, settings_markdown())
    if STORE_MARKER in markdown:
        markdown = markdown.replace(STORE_MARKER, store_markdown(sql_blocks(markdown)))
    return markdown
