"""``agentlog submit`` refuses input that is not JSON at once, naming the JSON error, before it
connects to anything (the worker's visible rejection stays for records other producers write)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.unit


def test_submit_with_input_that_is_not_json_exits_at_once_naming_the_json_error() -> None:
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "runtime.cli",
            # nothing listens here: an attempt to connect would hang, then fail differently
            "--bootstrap-servers",
            "127.0.0.1:1",
            "submit",
            "refund",
            "--input",
            "{not json",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done
    assert done.stdout == ""  # no run id: nothing was submitted
    assert done.stderr.strip() == (
        "agentlog: --input is not JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)"
    )
    assert elapsed < 20  # the interpreter's start-up, not a broker timeout
