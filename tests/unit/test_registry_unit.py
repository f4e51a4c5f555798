"""The registry access module's pure parts: what importing it costs, and how it fails."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runtime.log.schemas.registry import LookupUnavailable, compatibility_messages, lookup_ids
from support.services import ROOT

pytestmark = pytest.mark.unit


def test_the_serde_and_the_registry_module_load_without_the_registry_client() -> None:
    """A cold worker must not pay the client's import (authlib, httpx) before its first record."""
    probe = (
        "import sys, runtime.log.schemas.registry, runtime.log.schemas.serde; "
        "print(any(m.startswith('confluent_kafka.schema_registry') for m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "False", done.stderr


def test_a_url_plain_http_cannot_ask_is_left_to_the_client() -> None:
    with pytest.raises(LookupUnavailable):
        lookup_ids("mock://registry", [("s", '"string"')])
    with pytest.raises(LookupUnavailable):
        lookup_ids("http://127.0.0.1:9", [("s", '"string"')], timeout=2)  # nothing listens on port 9


def test_compatibility_messages_are_detail_and_never_raise() -> None:
    assert compatibility_messages("http://127.0.0.1:9", "s", '"string"', timeout=2) == []
    assert compatibility_messages("mock://registry", "s", '"string"') == []
