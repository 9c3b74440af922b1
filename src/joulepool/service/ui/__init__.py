"""The dashboard's static files: shipped in the package, no CDN."""

from __future__ import annotations

from importlib.resources import files

from starlette.responses import Response

UI_ASSETS = {"app.js": "text/javascript", "app.css": "text/css", "favicon.svg": "image/svg+xml"}
"""The files `/ui/{name}` serves, with their media types; `/ui` itself is `index.html`."""

_TYPES = {"index.html": "text/html", **UI_ASSETS}

SECURITY_HEADERS = {
    # Everything comes from this origin: no CDN, no inline script, no framing.
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


def ui_file(name: str) -> Response:
    """One of the dashboard's files, with a policy that lets it load nothing from elsewhere
    (API.md "Dashboard")."""
    body = files(__name__).joinpath(name).read_bytes()
    return Response(body, media_type=_TYPES[name], headers=SECURITY_HEADERS)
