"""A real MCP server over stdio for the integration tests (``python tests/support/mcp_orders.py``):
one tool, ``order_status``. ``MCP_ORDERS_LOG`` names a file each call appends to."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("orders")


@server.tool()
def order_status(order: str) -> str:
    """The status of an order."""
    log = os.environ.get("MCP_ORDERS_LOG")
    if log:
        with open(log, "a") as calls:
            calls.write(f"{order}\n")
    return f"order {order} is late"


if __name__ == "__main__":
    server.run()
