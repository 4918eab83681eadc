"""The DLQ web UI (placeholder)."""

from litestar import Router

ui_router = Router(path="/ui", route_handlers=[])
