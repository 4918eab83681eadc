"""The node's OpenAPI document: its configuration, and refinements the generator cannot make.

Litestar drops a bound of 0 (``minimum``, ``exclusiveMinimum``), the constraints of the
items of ``ids``, and ``additionalProperties: false`` of the bodies that refuse unknown
fields, and cannot say "exactly one of ``ids`` and ``filter``" or what the store allows in
``headers``; :func:`refine` writes all of them into the generated document so that it
matches what the API does (schemathesis fuzzes the API against this very document).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
from litestar import Litestar, Response, Router
from litestar._openapi.plugin import OpenAPIPlugin
from litestar.openapi.config import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, SwaggerRenderPlugin
from litestar.openapi.spec import Components, OpenAPI, Reference, Schema, SecurityScheme
from litestar.openapi.spec.enums import OpenAPIType

from rdq.admin import MAX_PACED_IDS
from rdq.app import App
from rdq.server import _models
from rdq.server._errors import error_response
from rdq.server._flow_models import RATE_PATTERN
from rdq.spi import bounds

__all__ = ["SWAGGER_ASSETS", "openapi_config", "refine", "swagger_assets"]


SWAGGER_ASSETS = "/ui/swagger"
"""Where the node serves the Swagger UI's scripts and styles (from the ``swagger-ui-py``
package, installed with ``rdq-core[server]``): the page loads nothing from elsewhere."""


def swagger_assets() -> Path | None:
    """The folder of the Swagger UI's files, or ``None`` when the package is missing."""
    try:
        import swagger_ui
    except ImportError:
        return None
    folder = Path(swagger_ui.__file__).parent / "static"
    return folder if (folder / "swagger-ui-bundle.js").exists() else None


def openapi_config(swagger: bool) -> OpenAPIConfig:
    """``/schema/openapi.json`` always; the Swagger UI at ``/schema/swagger`` only if asked,
    its scripts and styles served by the node itself (:data:`SWAGGER_ASSETS`). Unknown paths
    under ``/schema`` answer JSON 404s."""
    plugins: list[Any] = [JsonRenderPlugin()]
    if swagger:
        plugins.append(
            SwaggerRenderPlugin(
                js_url=f"{SWAGGER_ASSETS}/swagger-ui-bundle.js",
                css_url=f"{SWAGGER_ASSETS}/swagger-ui.css",
                standalone_preset_js_url=f"{SWAGGER_ASSETS}/swagger-ui-standalone-preset.js",
                favicon="<link rel='icon' type='image/svg+xml' href='/ui/static/favicon.svg'>",
            )
        )
    return OpenAPIConfig(
        title="rdq",
        version="1",
        description="The HTTP API of an rdq server node.",
        path="/schema",
        render_plugins=plugins,
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


_REFINEMENT = "rdq.openapi_refinement"
"""Where a node's app keeps the refinement its document gets when it is first generated."""


class _RefinedOpenAPIPlugin(OpenAPIPlugin):
    """Litestar's OpenAPI plugin, generating the document on first use as it does, then
    refining it once (:func:`refine`): a node is not made to generate its document (two
    thirds of the time ``create_app`` takes) until something reads it."""

    __slots__ = ()

    def provide_openapi(self) -> OpenAPI:
        fresh = not self._openapi
        openapi = super().provide_openapi()
        if fresh:
            self.app.state[_REFINEMENT](openapi)
        return openapi


def refine(
    app: Litestar,
    engine_app: App | None = None,
    worked: Sequence[str] = (),
    *,
    callbacks: bool = True,
    open_paths: Sequence[str] = (),
    closed_paths: Sequence[str] = (),
) -> None:
    """Write the rules the generator leaves out into ``app``'s OpenAPI document, when it is
    generated (at once if it already was); with the node's application (``engine_app``, one
    with handlers), the handlers and queues a submit may name; without a callback allow-list
    (``callbacks`` false), that a ``handler_ref`` is no callback URL; the probes this node
    leaves open (``open_paths``: no security, no 401/403) and those it closes
    (``closed_paths``: a bearer token)."""

    def refinement(openapi: OpenAPI) -> None:
        _refine(openapi, engine_app, worked, callbacks, open_paths, closed_paths)

    plugin = app.plugins.get(OpenAPIPlugin)
    if type(plugin) is OpenAPIPlugin and not plugin._openapi:
        app.state[_REFINEMENT] = refinement
        plugin.__class__ = _RefinedOpenAPIPlugin
    else:  # generated already, or a plugin this module does not know: refine it now
        refinement(app.openapi_schema)


def _refine(
    openapi: OpenAPI,
    engine_app: App | None,
    worked: Sequence[str],
    callbacks: bool,
    open_paths: Sequence[str],
    closed_paths: Sequence[str],
) -> None:
    _probes(openapi, open_paths, closed_paths)
    schemas = openapi.components.schemas or {}
    if engine_app is not None:
        _known_to_the_app(schemas.get("SubmitRequest"), engine_app, worked, callbacks)
    if not callbacks:
        _no_callbacks(schemas.get("SubmitRequest"))
    _bounded_below(schemas.get("SubmitRequest"), "delay", "dedup_window", "dedup_max_age")
    _bounded_below(schemas.get("RetryRequest"), "base", "cap")
    _bounded_below(schemas.get("RetryRequest"), "timeout", exclusive=True)
    _headers(schemas.get("SubmitRequest"))
    _exactly_one(schemas.get("ActionRequest"), "FilterRequest")
    _exactly_one(schemas.get("CancelRequest"), "TaskFilterRequest")
    _exactly_one(schemas.get("RedriveRequest"), "FilterRequest")
    _exactly_one(schemas.get("RetryNowRequest"), "PendingFilterRequest")
    _rate(schemas.get("RedriveRequest"))
    _paced_ids(schemas.get("RedriveRequest"))
    _one_name(schemas.get("BreakerRequest"), "key", "handler", "dependency")
    _at_most_one(schemas.get("PauseRequest"), "handler", "dependency")
    for name in _models.__all__:
        model = getattr(_models, name)
        schema = schemas.get(name)
        closed = isinstance(model, type) and issubclass(model, msgspec.Struct)
        if closed and model.__struct_config__.forbid_unknown_fields and schema is not None:
            schema.additional_properties = False


def _probes(openapi: OpenAPI, open_paths: Sequence[str], closed_paths: Sequence[str]) -> None:
    """The probes' security as this node configures them (the routes can only say "maybe")."""
    for path, item in (openapi.paths or {}).items():
        operation = item.get
        if operation is None or path not in (*open_paths, *closed_paths):
            continue
        if path in open_paths:
            operation.security = []
            for status in ("401", "403"):
                (operation.responses or {}).pop(status, None)
        else:
            operation.security = [{"bearer": []}]


def _bounded_below(schema: Schema | None, *names: str, exclusive: bool = False) -> None:
    """The ``names`` of ``schema`` are a number of 0 or more (above 0 when ``exclusive``),
    or null: the bound of 0 the generator drops."""
    if schema is None or not schema.properties:
        return
    for name in names:
        prop = schema.properties.get(name)
        if not isinstance(prop, Schema):
            continue
        number = Schema(
            type=OpenAPIType.NUMBER,
            minimum=None if exclusive else 0,
            exclusive_minimum=0 if exclusive else None,
            maximum=prop.maximum,
        )
        schema.properties[name] = Schema(
            one_of=[number, Schema(type=OpenAPIType.NULL)],
            description=prop.description,
        )


def _headers(schema: Schema | None) -> None:
    """What ``rdq.spi.bounds.check_task`` allows: a few names of 1-128 characters, short values."""
    if schema is None or not schema.properties:
        return
    schema.properties["headers"] = Schema(
        type=OpenAPIType.OBJECT,
        max_properties=bounds.MAX_HEADERS,
        property_names=Schema(
            type=OpenAPIType.STRING, min_length=1, max_length=bounds.MAX_HEADER_NAME_LENGTH
        ),
        additional_properties=Schema(
            type=OpenAPIType.STRING, max_length=bounds.MAX_HEADER_VALUE_LENGTH
        ),
    )


def _task_ids(min_items: int | None = None) -> Schema:
    task_id = Schema(
        type=OpenAPIType.STRING,
        min_length=1,
        max_length=bounds.MAX_ID_LENGTH,
        pattern=_models.TASK_ID_PATTERN,
    )
    return Schema(
        type=OpenAPIType.ARRAY,
        items=task_id,
        min_items=min_items,
        max_items=bounds.MAX_SELECTOR_IDS,
    )


def _exactly_one(schema: Schema | None, filter_schema: str) -> None:
    """``ids`` (a non-empty array) or ``filter``, never both, never neither."""
    if schema is None:
        return
    null = Schema(type=OpenAPIType.NULL)
    ids = _task_ids(min_items=1)
    if schema.properties and "ids" in schema.properties:
        schema.properties["ids"] = Schema(one_of=[_task_ids(), null])
    by_filter = Reference(ref=f"#/components/schemas/{filter_schema}")
    schema.one_of = [
        Schema(required=["ids"], properties={"ids": ids, "filter": null}),
        Schema(required=["filter"], properties={"filter": by_filter, "ids": null}),
    ]
    schema.description = (
        (schema.description or "") + " Give exactly one of `ids` (non-empty) and `filter`."
    ).strip()


def _rate(schema: Schema | None) -> None:
    """``rate``: tasks per second (above 0, at most 100,000) or text such as ``"50/s"``."""
    if schema is None or not schema.properties:
        return
    schema.properties["rate"] = Schema(
        one_of=[
            Schema(type=OpenAPIType.NUMBER, exclusive_minimum=0, maximum=100_000),
            Schema(type=OpenAPIType.STRING, min_length=1, max_length=32, pattern=RATE_PATTERN),
            Schema(type=OpenAPIType.NULL),
        ],
        description="Tasks per second, or text: `50/s`, `600/min`, `3000/h` (more than 0 and "
        "at most 100,000 in the unit given).",
    )


def _at_most_one(schema: Schema | None, *names: str) -> None:
    """At most one of ``names`` is given (not null): each alternative leaves all but one of
    them out or null."""
    if schema is None or not schema.properties:
        return
    null = Schema(type=OpenAPIType.NULL)
    schema.any_of = [Schema(properties={n: null for n in names if n != name}) for name in names]
    schema.description = (
        (schema.description or "") + f" Give at most one of {', '.join(names)}."
    ).strip()


_CALLBACK = r"^[Hh][Tt][Tt][Pp][Ss]?://"


def _no_callbacks(schema: Schema | None) -> None:
    """A node without a callback allow-list refuses every callback URL."""
    if schema is None or not schema.properties:
        return
    given = schema.properties.get("handler_ref")
    if isinstance(given, Schema):
        given.schema_not = Schema(pattern=_CALLBACK)
        given.description = (
            (given.description or "") + " No callback URL: this node allows no callback host."
        ).strip()


def _known_to_the_app(
    schema: Schema | None, engine_app: App, worked: Sequence[str], callbacks: bool
) -> None:
    """A node with an application refuses a ``handler_ref`` it does not know (a callback
    URL aside, checked against the allow-list) and a ``queue`` neither it nor the node
    serves, unless ``force`` is true. (An import path under the application's allowed
    prefixes is known too; the document lists the registered names only.)"""
    if schema is None or not schema.properties:
        return
    handlers: list[Schema | Reference] = [
        Schema(type=OpenAPIType.STRING, enum=list(engine_app.handler_names))
    ]
    if callbacks:
        handlers.append(Schema(type=OpenAPIType.STRING, pattern=_CALLBACK))
    queues = sorted({*engine_app.queues, *worked})
    forced = Schema(required=["force"], properties={"force": Schema(const=True)})
    known = Schema(
        properties={
            "handler_ref": Schema(any_of=handlers),
            "queue": Schema(type=OpenAPIType.STRING, enum=list(queues)),
        }
    )
    schema.any_of = [forced, known]
    schema.description = (
        (schema.description or "")
        + " This node's application takes the handlers and queues listed; `force` submits "
        "others."
    ).strip()


def _paced_ids(schema: Schema | None) -> None:
    """A paced redrive (a ``rate`` given) by ids takes at most ``MAX_PACED_IDS`` of them."""
    if schema is None:
        return
    null = Schema(type=OpenAPIType.NULL)
    few = Schema(one_of=[_task_ids(min_items=1), null])
    few_ids = few.one_of[0] if few.one_of else None
    if isinstance(few_ids, Schema):
        few_ids.max_items = MAX_PACED_IDS
    schema.any_of = [Schema(properties={"rate": null}), Schema(properties={"ids": few})]


def _one_name(schema: Schema | None, *names: str) -> None:
    """Exactly one of ``names`` is a string; the others are absent or null."""
    if schema is None or not schema.properties:
        return
    null = Schema(type=OpenAPIType.NULL)
    alternatives: list[Schema | Reference] = []
    for name in names:
        given = schema.properties[name]
        chosen = given.one_of[0] if isinstance(given, Schema) and given.one_of else given
        alternatives.append(
            Schema(
                required=[name],
                properties={n: (chosen if n == name else null) for n in names},
            )
        )
    schema.one_of = alternatives
    schema.description = (
        (schema.description or "") + f" Give exactly one of {', '.join(names)}."
    ).strip()
