"""TLS for `pool serve`: a certificate and key, and for mutual TLS the CA whose
client certificates are accepted. The files are checked here, before the service starts,
so a wrong path or a key that does not match its certificate is one line naming the file,
not a traceback from inside the server; uvicorn is then given the same files (`ssl_*`)."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from joulepool.errors import InvalidInput


def _readable(path: str, flag: str) -> str:
    p = Path(path)
    if not p.exists():
        raise InvalidInput(flag, f"{path}: no such file")
    if not p.is_file():
        raise InvalidInput(flag, f"{path}: not a file")
    return path


def tls_options(cert: str | None, key: str | None, client_ca: str | None) -> dict[str, Any]:
    """uvicorn's `ssl_*` keyword arguments for these files (empty: plain HTTP), checked by
    loading them into a server context as uvicorn will."""
    if cert is None and key is None:
        if client_ca is not None:
            raise InvalidInput("--tls-client-ca", "needs --tls-cert and --tls-key")
        return {}
    if cert is None or key is None:
        raise InvalidInput("--tls-cert", "give --tls-cert and --tls-key together")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(_readable(cert, "--tls-cert"), _readable(key, "--tls-key"))
    except ssl.SSLError as exc:
        raise InvalidInput(
            "--tls-cert", f"{cert} with key {key}: not a certificate and its key ({exc.reason})"
        ) from None
    options: dict[str, Any] = {"ssl_certfile": cert, "ssl_keyfile": key}
    if client_ca is not None:
        try:
            context.load_verify_locations(_readable(client_ca, "--tls-client-ca"))
        except ssl.SSLError as exc:
            raise InvalidInput(
                "--tls-client-ca", f"{client_ca}: no CA certificate ({exc.reason})"
            ) from None
        # Mutual TLS: a client without a certificate from this CA never reaches HTTP.
        options |= {"ssl_ca_certs": client_ca, "ssl_cert_reqs": ssl.CERT_REQUIRED}
    return options
