"""``agentlog ui``'s access rules, on a real server bound to the loopback (no store needed: every
request here is refused or served before a page asks the store, or finds the store unreachable)."""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import pytest

from runtime.config import Settings
from support.ui_store import free_port as any_free_port
from ui.server import COOKIE, UiConfigError, UiServer

pytestmark = pytest.mark.unit

NO_STORE = "http://127.0.0.1:9"  # nothing listens on the discard port: pages answer 503


def free_port() -> int:
    """A port of the range this module's servers use (the browser tests take 25200 on)."""
    return any_free_port(25100, 25199)


@pytest.fixture
def make_server() -> Iterator[object]:
    started: list[UiServer] = []

    def make(token: str | None = None, host: str = "127.0.0.1") -> UiServer:
        server = UiServer(Settings(), NO_STORE, host, free_port(), token)
        server.start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


def request(
    server: UiServer, method: str, path: str, headers: dict[str, str] | None = None
) -> http.client.HTTPResponse:
    host, port = server.address
    conn = http.client.HTTPConnection(host, port, timeout=20)
    conn.request(method, path, headers=headers or {})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_the_ui_is_read_only(make_server: object, method: str) -> None:
    response = request(make_server(), method, "/run/x")  # type: ignore[operator]
    assert response.status == 405 and response.getheader("Allow") == "GET, HEAD"


def test_on_the_loopback_only_loopback_host_headers_are_answered(make_server: object) -> None:
    server = make_server()  # type: ignore[operator]
    assert request(server, "GET", "/static/ui.css").status == 200
    assert request(server, "GET", "/static/ui.css", {"Host": f"localhost:{server.address[1]}"}).status == 200
    # A page elsewhere whose name resolves to 127.0.0.1 (DNS rebinding) sends its own Host.
    assert request(server, "GET", "/static/ui.css", {"Host": "evil.example:8787"}).status == 403


def test_a_token_is_needed_and_a_token_link_sets_a_cookie(make_server: object) -> None:
    token = "t" * 24
    server = make_server(token)  # type: ignore[operator]
    assert request(server, "GET", "/static/ui.css").status == 401
    assert (
        request(server, "GET", "/static/ui.css", {"Authorization": "Bearer wrong-token-wrong"}).status == 401
    )
    assert request(server, "GET", "/static/ui.css", {"Authorization": f"Bearer {token}"}).status == 200
    assert request(server, "GET", "/?token=nope").status == 401
    link = request(server, "GET", f"/diff?a=x&token={token}")
    assert link.status == 303 and link.getheader("Location") == "/diff?a=x"
    cookie = link.getheader("Set-Cookie") or ""
    assert cookie.startswith(f"{COOKIE}={token};") and "HttpOnly" in cookie
    assert request(server, "GET", "/static/ui.css", {"Cookie": f"{COOKIE}={token}"}).status == 200


def test_assets_ship_with_the_package_and_nothing_else_is_served(make_server: object) -> None:
    server = make_server()  # type: ignore[operator]
    assert request(server, "GET", "/static/ui.js").getheader("Content-Type") == "text/javascript"
    assert request(server, "GET", "/static/..%2Fpages.py").status == 404
    assert request(server, "GET", "/nowhere").status == 404


def test_an_unreachable_store_is_a_503_naming_it(make_server: object) -> None:
    server = make_server()  # type: ignore[operator]
    host, port = server.address
    conn = http.client.HTTPConnection(host, port, timeout=60)
    conn.request("GET", "/")
    response = conn.getresponse()
    body = response.read().decode()
    conn.close()
    assert response.status == 503 and NO_STORE in body


def test_exposing_beyond_the_loopback_needs_a_token() -> None:
    with pytest.raises(UiConfigError, match="needs a token"):
        UiServer(Settings(), NO_STORE, "0.0.0.0", free_port())
