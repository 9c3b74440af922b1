"""Request bodies: read as JSON and handed to the standard's own readers (`from_json` and
`checks.py`, the path `pool exec` takes), off the event loop when large (API.md).

One set of rules decides what a body may hold. The pydantic request models in
`service/models.py` only publish each body's shape in the OpenAPI schema (`documented`);
nothing validates against them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from joulepool.checks import check_keys
from joulepool.errors import InvalidInput

PARSE_OFF_LOOP_BYTES = 65_536
"""A JSON body longer than this is parsed in a worker thread, not on the event loop: there a
megabyte of JSON would hold every other request, probes included, for a tenth of a second."""

BODY = "body"
"""Where a body's fields are named in an `invalid_input` answer: `body.estimate.uj`."""


async def json_body(request: Request) -> Any:
    """The request's body as parsed JSON (API.md: every body is a JSON object).

    A body sent as another media type, or none, or one that is not JSON is `InvalidInput`
    (422 `invalid_input`), as FastAPI's own reading of a JSON body would refuse it.
    """
    raw = await request.body()
    if not raw:
        raise InvalidInput(BODY, "missing: a JSON object is required")
    kind = request.headers.get("content-type")
    if kind is not None and not is_json(kind):
        raise InvalidInput(BODY, "must be a JSON object, sent as application/json")
    if len(raw) > PARSE_OFF_LOOP_BYTES:
        return await run_in_threadpool(parse, raw)
    return parse(raw)


def is_json(content_type: str) -> bool:
    """Whether a Content-Type names JSON (`application/json`, or `application/...+json`)."""
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (
        kind.startswith("application/") and kind.endswith("+json")
    )


def parse(raw: bytes) -> Any:
    """JSON as FastAPI reads it (the standard library's parser), refusals as `InvalidInput`."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise InvalidInput(BODY, "nested too deeply") from None
    except ValueError as exc:
        raise InvalidInput(BODY, f"not valid JSON: {exc}") from None


def fields(obj: object, required: Iterable[str], optional: Iterable[str] = ()) -> Mapping[str, Any]:
    """A body's top-level object, refused naming an unknown or missing field (CONFORMANCE.md;
    null is absent for an optional field, `checks.check_keys`)."""
    return check_keys(obj, BODY, required, optional)


def documented(model: type[BaseModel]) -> dict[str, Any]:
    """A route's `openapi_extra` that publishes `model` as its JSON request body."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def with_request_schemas(schema: dict[str, Any], models: Iterable[type[BaseModel]]) -> None:
    """Add the request models' JSON schemas (and the models they nest) to an OpenAPI
    document's components, where `documented` refers to them."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in models:
        own = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, nested in own.pop("$defs", {}).items():
            components.setdefault(name, nested)
        components[model.__name__] = own
