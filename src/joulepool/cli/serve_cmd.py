"""`pool serve DIR` and `pool token add DIR`: the admission service (API.md)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

from joulepool.cli.output import add_json, emit

DEFAULT_PORT = 7460


def build_service(
    folder: Path, postgres: str | None, replay_workers: int, ledger: str | None = None
) -> Any:
    """The service for a deployment folder, its ledger on file or on PostgreSQL.

    In PostgreSQL the ledger is named `ledger`, by default the steward's identifier, so
    several deployments can share one database.
    """
    from joulepool.deployment import CONFIG, KEY, LEDGER, TOKENS, WITNESSES, read_config
    from joulepool.errors import PoolError
    from joulepool.ledger.keys import load_key_file
    from joulepool.pool import Pool
    from joulepool.service.app import Service
    from joulepool.service.tokens import TokenBook, read_tokens
    from joulepool.witnesses import kept_marks

    config = read_config(folder / CONFIG)
    key = load_key_file(folder / KEY, require_secret=True)
    if key.kid != config.steward:
        raise PoolError(f"{folder / KEY}: kid {key.kid!r} is not the steward {config.steward!r}")
    tokens = TokenBook(read_tokens(folder / TOKENS))

    def opener() -> Pool:
        # Kept receipts are read at each start: a ledger shorter than one is refused (§6.1).
        marks, problems = kept_marks(folder / WITNESSES, config.steward)
        for problem in problems:
            print(f"pool serve: warning: {folder / WITNESSES}: {problem}", file=sys.stderr)
        store: Any
        if postgres:
            from joulepool.stores.postgres import PostgresStore

            store = PostgresStore(postgres, ledger=ledger or config.steward)
        else:
            from joulepool.stores.file import FileStore

            store = FileStore(folder / LEDGER)
        try:
            return Pool(
                config.tree,
                key,
                store,
                idle_policy=config.idle,
                required_evidence=config.required_evidence,
                period=config.period,
                replay_workers=replay_workers,
                acknowledged=marks,
            )
        except BaseException:
            store.close()
            raise

    return Service(opener, tokens, folder / WITNESSES)


def _tune_collector(service: Any) -> None:
    """Keep the cyclic garbage collector out of the admission path's tail latency.

    Each request leaves a few cycles (frames, futures), so with the default thresholds
    the collector runs every few hundred requests and, now and then, walks every object
    of the replayed ledger state: p99 went from about 20 ms to 40-50 ms under load. Rarer
    young collections and a frozen replayed state (never scanned again) keep the pauses
    short; the collector still runs, so cycles are still freed.
    """
    import gc

    gc.set_threshold(50_000, 20, 100)
    opener = service.opener

    def open_and_freeze() -> Any:
        pool = opener()
        gc.freeze()
        return pool

    service.opener = open_and_freeze


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from joulepool.deployment import CONFIG, TOKENS, read_config
    from joulepool.errors import InvalidInput, PoolError
    from joulepool.service.app import create_app
    from joulepool.service.tokens import TokenBook, read_tokens

    folder = Path(args.dir)
    if args.ledger and not args.postgres:
        raise InvalidInput("--ledger", "names a ledger in PostgreSQL; add --postgres DSN")
    service = build_service(folder, args.postgres, args.replay_workers, args.ledger)
    _tune_collector(service)
    app = create_app(service)

    def reload(_signum: int, _frame: object) -> None:
        # A changed tree, period or token list takes effect; a broken one is refused and the
        # old stays, whole: nothing is applied before everything has been read.
        try:
            config = read_config(folder / CONFIG)
            tokens = TokenBook(read_tokens(folder / TOKENS))
        except PoolError as exc:
            print(
                f"pool serve: reload refused, keeping the old configuration: {exc}", file=sys.stderr
            )
            return
        if service.pool is not None:
            try:
                service.pool.reload(config.tree, config.period)
            except PoolError as exc:
                print(f"pool serve: reload refused, keeping the old one: {exc}", file=sys.stderr)
                return
        service.tokens = tokens
        print("pool serve: configuration reloaded", file=sys.stderr)

    signal.signal(signal.SIGHUP, reload)
    if args.host not in ("127.0.0.1", "::1", "localhost"):
        print(f"pool serve: listening on {args.host}, beyond loopback", file=sys.stderr)
    print(
        f"pool serve: {folder} on http://{args.host}:{args.port} (pid {os.getpid()})",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    return 0


def _token_add(args: argparse.Namespace) -> int:
    from joulepool.deployment import CONFIG, TOKENS, read_config
    from joulepool.errors import InvalidInput
    from joulepool.service.tokens import TENANT_PREFIX, add_token

    folder = Path(args.dir)
    if args.scope.startswith(TENANT_PREFIX):
        tenant = args.scope[len(TENANT_PREFIX) :]
        if tenant not in read_config(folder / CONFIG).tree:
            raise InvalidInput("--scope", f"no entitlement {tenant!r} in {folder / CONFIG}")
    name = args.name or args.scope.replace(":", "-")
    token = add_token(folder / TOKENS, name, args.scope)
    emit(args, {"name": name, "scope": args.scope, "token": token}, lambda c: c.print(token))
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool serve` and `pool token`."""
    p = sub.add_parser("serve", help="run the admission service over HTTP (API.md)")
    p.add_argument("dir", metavar="DIR", help="the deployment folder")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port ({DEFAULT_PORT})")
    p.add_argument("--postgres", metavar="DSN", help="keep the ledger in PostgreSQL, for replicas")
    p.add_argument(
        "--ledger", metavar="NAME", help="the ledger's name in PostgreSQL (the steward's id)"
    )
    p.add_argument("--replay-workers", type=int, default=1, help="processes verifying at start-up")
    p.add_argument(
        "--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"]
    )
    p.set_defaults(handler=_serve)

    t = sub.add_parser("token", help="bearer tokens for pool serve")
    tsub = t.add_subparsers(dest="token_command", metavar="SUBCOMMAND", required=True)
    a = tsub.add_parser("add", help="create a token, print it once, store only its hash")
    a.add_argument("dir", metavar="DIR")
    a.add_argument("--scope", required=True, help="'operator' or 'tenant:<entitlement id>'")
    a.add_argument("--name", help="a name for the token (default: from the scope)")
    add_json(a)
    a.set_defaults(handler=_token_add)
