"""The node's OpenAPI document: its configuration, and refinements the generator cannot make.

Litestar drops a ``minimum`` of 0 and cannot say "exactly one of ``ids`` and ``filter``";
:func:`refine` writes both into the generated document so that it matches what the API does
(schemathesis fuzzes the API against this very document).
"""

from __future__ import annotations

from typing import Any

from litestar import Litestar, Response, Router
from litestar.openapi.config import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, SwaggerRenderPlugin
from litestar.openapi.spec import Components, Reference, Schema, SecurityScheme
from litestar.openapi.spec.enums import OpenAPIType

from rdq.server._errors import error_response

__all__ = ["openapi_config", "refine"]


def openapi_config(swagger: bool) -> OpenAPIConfig:
    """``/schema/openapi.json`` always; the Swagger UI at ``/schema/swagger`` only if asked
    (it loads its scripts from a CDN). Unknown paths under ``/schema`` answer JSON 404s."""
    return OpenAPIConfig(
        title="rdq",
        version="1",
        description="The HTTP API of an rdq server node.",
        path="/schema",
        render_plugins=[JsonRenderPlugin(), *([SwaggerRenderPlugin()] if swagger else [])],
        openapi_router=Router(
            "/schema", route_handlers=[], include_in_schema=False, after_request=_json_not_found
        ),
        components=Components(
            security_schemes={"bearer": SecurityScheme(type="http", scheme="bearer")}
        ),
        security=[{"bearer": []}],
    )


async def _json_not_found(response: Response[Any]) -> Response[Any]:
    if response.status_code == 404:
        return error_response(404, "not_found", "no such document")
    return response


def refine(app: Litestar) -> None:
    """Write the rules the generator leaves out into ``app``'s OpenAPI document."""
    schemas = app.openapi_schema.components.schemas or {}
    _minimum_zero(schemas.get("SubmitRequest"), "delay")
    _minimum_zero(schemas.get("RetryRequest"), "base", "cap")
    _exactly_one(schemas.get("ActionRequest"), "FilterRequest")
    _exactly_one(schemas.get("CancelRequest"), "TaskFilterRequest")


def _minimum_zero(schema: Schema | None, *names: str) -> None:
    if schema is None or not schema.properties:
        return
    for name in names:
        prop = schema.properties.get(name)
        if not isinstance(prop, Schema):
            continue
        number = Schema(type=OpenAPIType.NUMBER, minimum=0, maximum=prop.maximum)
        schema.properties[name] = Schema(
            one_of=[number, Schema(type=OpenAPIType.NULL)],
            description=prop.description,
        )


def _exactly_one(schema: Schema | None, filter_schema: str) -> None:
    """``ids`` (a non-empty array) or ``filter``, never both, never neither."""
    if schema is None:
        return
    null = Schema(type=OpenAPIType.NULL)
    ids = Schema(type=OpenAPIType.ARRAY, min_items=1, items=Schema(type=OpenAPIType.STRING))
    by_filter = Reference(ref=f"#/components/schemas/{filter_schema}")
    schema.one_of = [
        Schema(required=["ids"], properties={"ids": ids, "filter": null}),
        Schema(required=["filter"], properties={"filter": by_filter, "ids": null}),
    ]
    schema.description = (
        (schema.description or "") + " Give exactly one of `ids` (non-empty) and `filter`."
    ).strip()
