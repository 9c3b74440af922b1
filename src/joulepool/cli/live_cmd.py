"""`pool progress` and `pool claim-token` (API.md "Run time"; standard §5.1).

`pool progress --units N` is one line in a training loop: it reads POOL_URL, POOL_CLAIM and
POOL_CLAIM_TOKEN from the environment and posts the claim's completed units. It uses the
standard library only (no web stack to import on every step), waits at most a few
seconds, and a failure is one line on stderr and exit 1, never a traceback: the loop goes
on whether or not the service heard it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TIMEOUT_S = 5.0
"""How long one report may take: a training step never waits longer on the service."""

ENV = ("POOL_URL", "POOL_CLAIM", "POOL_CLAIM_TOKEN")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pool progress",
        description="report a running claim's completed units (cumulative, never decreasing) "
        "to pool serve, from POOL_URL, POOL_CLAIM and POOL_CLAIM_TOKEN",
    )
    _progress_flags(p)
    return p


def _progress_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--units", type=int, required=True, metavar="N", help="units completed so far")
    p.add_argument("--unit", default="steps", help="what a unit is (default: steps)")
    p.add_argument("--total", type=int, metavar="M", help="units the job will complete, if known")


def _fail(code: str, detail: str) -> int:
    print(f"pool: {code}: {detail}", file=sys.stderr)
    return 1


def run_progress(argv: Sequence[str]) -> int:
    """`pool progress`: post `{"units", "unit", "total"?}` for the job's claim (API.md)."""
    args = _parser().parse_args(list(argv))
    return send_progress(args)


def send_progress(args: argparse.Namespace) -> int:
    """Post one progress report; 0 when the service kept it, 1 with one line otherwise."""
    missing = [name for name in ENV if not os.environ.get(name)]
    if missing:
        return _fail("missing_environment", f"{', '.join(missing)} not set")
    url, claim, token = (os.environ[name] for name in ENV)
    if not url.startswith(("http://", "https://")):
        return _fail("invalid_input", "POOL_URL must be http(s)://host[:port]")
    if args.units < 0 or (args.total is not None and args.total < 0):
        return _fail("invalid_input", "--units and --total must not be negative")
    body: dict[str, object] = {"units": args.units, "unit": args.unit}
    if args.total is not None:
        body["total"] = args.total
    path = "/v1/claims/" + urllib.parse.quote(claim, safe="") + "/progress"
    request = urllib.request.Request(  # noqa: S310 (the scheme is checked above)
        url.rstrip("/") + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310
            answer.read()
    except urllib.error.HTTPError as exc:
        try:
            said = json.loads(exc.read(4096))
            return _fail(str(said["error"]), str(said["detail"]))
        except (ValueError, KeyError, TypeError):
            return _fail("http_error", f"HTTP {exc.code}")
    except (urllib.error.URLError, OSError) as exc:
        return _fail("unreachable", f"{url}: {getattr(exc, 'reason', exc)}")
    return 0


def _claim_token(args: argparse.Namespace) -> int:
    from joulepool.cli.paths import deployment_dir
    from joulepool.deployment.claim_tokens import claim_secret, claim_token

    print(claim_token(claim_secret(deployment_dir(args.dir)), args.claim))
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool progress` and `pool claim-token`."""
    p = sub.add_parser(
        "progress",
        help="report a running claim's completed units (POOL_URL, POOL_CLAIM, POOL_CLAIM_TOKEN)",
    )
    _progress_flags(p)
    p.set_defaults(handler=send_progress)
    p = sub.add_parser(
        "claim-token", help="print a claim's own token, which may report its progress only"
    )
    p.add_argument("dir", metavar="DIR")
    p.add_argument("claim", metavar="CLAIM", help="the claim's ledger id")
    p.set_defaults(handler=_claim_token)


def client_of(args: argparse.Namespace) -> tuple[str, str] | None:
    """The service and token a read asks (`--url` or POOL_URL, `--token-file`), or None to
    read the ledger here. A URL without a token file is refused by name."""
    from joulepool.errors import InvalidInput

    url = getattr(args, "url", None) or (None if args.dir else os.environ.get("POOL_URL"))
    if url is None:
        return None
    if not url.startswith(("http://", "https://")):
        raise InvalidInput("--url", "must be http(s)://host[:port]")
    if not args.token_file:
        raise InvalidInput("--token-file", "asking a service needs a token file")
    try:
        token = Path(args.token_file).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(args.token_file, f"cannot read the token: {exc}") from None
    if not token or any(c.isspace() for c in token):
        raise InvalidInput(args.token_file, "must hold one token on one line")
    return url.rstrip("/"), token


def ask(client: tuple[str, str], path: str, params: dict[str, object] | None = None) -> Any:
    """GET `path` from the service as JSON; its error answer as a `PoolError` of its code."""
    from joulepool.errors import PoolError

    url, token = client
    query = {k: str(v) for k, v in (params or {}).items() if v is not None}
    full = url + path + ("?" + urllib.parse.urlencode(query) if query else "")
    request = urllib.request.Request(full, headers={"Authorization": f"Bearer {token}"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        error = PoolError(f"HTTP {exc.code} from {url}")
        try:
            said = json.loads(exc.read(4096))
            error = PoolError(str(said["detail"]))
            error.code = str(said["error"])
        except (ValueError, KeyError, TypeError):
            pass
        raise error from None
    except (urllib.error.URLError, OSError) as exc:
        error = PoolError(f"{url}: {getattr(exc, 'reason', exc)}")
        error.code = "unreachable"
        raise error from None


def add_client(p: argparse.ArgumentParser) -> None:
    """`--url` and `--token-file`: ask a running `pool serve` instead of reading the ledger."""
    p.add_argument("--url", help="ask this pool serve (default: POOL_URL when no DIR is given)")
    p.add_argument("--token-file", metavar="F", help="file holding the bearer token for --url")
