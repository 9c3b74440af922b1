"""The API reference at `/docs`, rendered from the OpenAPI schema by the service itself.

FastAPI's own page loads swagger-ui from a CDN, so on an air-gapped cluster it renders
nothing. This one is plain HTML built on the server from `/openapi.json`: no script, no
request to anywhere else, readable in any browser and in `curl`. It describes the API,
never a tenant's data, so like `/openapi.json` it needs no token.
"""

from __future__ import annotations

from html import escape
from typing import Any

_STYLE = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;
color:#1b1b1b}
h2{border-bottom:1px solid #ccc;padding-bottom:.2rem;margin-top:2.5rem}
h3{font-family:ui-monospace,monospace;font-size:1rem;margin:1.6rem 0 .3rem}
.m{display:inline-block;min-width:3.5rem;font-weight:bold}
table{border-collapse:collapse;margin:.3rem 0}
td,th{border:1px solid #ddd;padding:.2rem .5rem;text-align:left;vertical-align:top}
code{font-family:ui-monospace,monospace}
"""


def api_reference(schema: dict[str, Any]) -> str:
    """The HTML reference of an OpenAPI 3 `schema` (API.md): paths, then shapes."""
    info = schema.get("info", {})
    parts = [
        "<!doctype html><html lang=en><meta charset=utf-8>",
        f"<title>{escape(str(info.get('title', 'API')))}</title><style>{_STYLE}</style>",
        f"<h1>{escape(str(info.get('title', 'API')))} <small>v{escape(str(info.get('version', '')))}</small></h1>",
        f"<p>{escape(str(info.get('description', '')))}</p>",
        "<p>Every path but the probes, <code>/docs</code> and <code>/openapi.json</code> needs "
        "<code>Authorization: Bearer &lt;token&gt;</code>. The machine-readable schema is "
        "<a href='/openapi.json'>/openapi.json</a>.</p>",
        "<h2>Paths</h2>",
    ]
    for path, methods in schema.get("paths", {}).items():
        for method, op in methods.items():
            parts.append(_operation(path, method, op))
    parts.append("<h2>Shapes</h2>")
    for name, shape in schema.get("components", {}).get("schemas", {}).items():
        parts.append(_shape(name, shape))
    parts.append("</html>")
    return "\n".join(parts)


def _operation(path: str, method: str, op: dict[str, Any]) -> str:
    out = [
        f"<h3 id='{escape(method + path)}'><span class=m>{escape(method.upper())}</span> "
        f"{escape(path)}</h3>",
        f"<p>{escape(str(op.get('description') or op.get('summary') or ''))}</p>",
    ]
    params = op.get("parameters", [])
    if params:
        rows = "".join(
            f"<tr><td><code>{escape(str(p.get('name')))}</code></td>"
            f"<td>{escape(str(p.get('in')))}</td><td>{_type(p.get('schema', {}))}</td>"
            f"<td>{'required' if p.get('required') else ''}</td></tr>"
            for p in params
        )
        out.append(
            f"<table><tr><th>parameter</th><th>in</th><th>type</th><th></th></tr>{rows}</table>"
        )
    body = op.get("requestBody", {}).get("content", {})
    for media, spec in body.items():
        out.append(f"<p>body ({escape(media)}): {_type(spec.get('schema', {}))}</p>")
    answers = "".join(
        f"<tr><td>{escape(str(status))}</td><td>{escape(str(r.get('description', '')))}</td>"
        f"<td>{', '.join(_type(s.get('schema', {})) for s in r.get('content', {}).values())}</td></tr>"
        for status, r in op.get("responses", {}).items()
    )
    out.append(f"<table><tr><th>status</th><th>meaning</th><th>shape</th></tr>{answers}</table>")
    return "\n".join(out)


def _shape(name: str, shape: dict[str, Any]) -> str:
    required = set(shape.get("required", []))
    rows = "".join(
        f"<tr><td><code>{escape(field)}</code></td><td>{_type(spec)}</td>"
        f"<td>{'required' if field in required else 'optional'}</td>"
        f"<td>{escape(str(spec.get('description', '')))}</td></tr>"
        for field, spec in shape.get("properties", {}).items()
    )
    doc = escape(str(shape.get("description", "")))
    table = f"<table><tr><th>field</th><th>type</th><th></th><th></th></tr>{rows}</table>"
    return f"<h3 id='{escape(name)}'>{escape(name)}</h3><p>{doc}</p>{table if rows else ''}"


def _type(spec: dict[str, Any]) -> str:
    """A schema's type in a few words, with links to named shapes."""
    if "$ref" in spec:
        name = str(spec["$ref"]).rsplit("/", 1)[-1]
        return f"<a href='#{escape(name)}'>{escape(name)}</a>"
    for key in ("anyOf", "oneOf"):
        if key in spec:
            return " | ".join(_type(s) for s in spec[key])
    kind = str(spec.get("type", "any"))
    if kind == "array":
        return f"array of {_type(spec.get('items', {}))}"
    if "enum" in spec:
        return " | ".join(f"<code>{escape(repr(v))}</code>" for v in spec["enum"])
    if "const" in spec:
        return f"<code>{escape(repr(spec['const']))}</code>"
    bounds = [f"{k} {spec[k]}" for k in ("minimum", "maximum", "maxLength", "pattern") if k in spec]
    return escape(kind + (f" ({', '.join(bounds)})" if bounds else ""))
