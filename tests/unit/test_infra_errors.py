"""infra's errors name the service, the reason and the log (no service needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra import process
from infra.errors import ServiceError

pytestmark = pytest.mark.unit


def test_service_error_names_the_service_the_reason_and_the_log(tmp_path: Path) -> None:
    log = tmp_path / "svc.log"
    log.write_text("".join(f"line {i}\n" for i in range(40)))
    with pytest.raises(ServiceError) as caught:
        process.wait_for_port("svc", "127.0.0.1", 1, timeout=0.3, log_path=log)
    message = str(caught.value)
    assert message.startswith("svc: timed out")
    assert str(log) in message
    assert "line 39" in message and "line 20" in message and "line 19\n" not in message
