"""`pool serve DIR` and `pool token add DIR`: the admission service (API.md)."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from joulepool.cli.output import add_json, emit

if TYPE_CHECKING:
    from joulepool.service.tls import Tls

DEFAULT_PORT = 7460


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type: a positive number of `kind`, refused with the value it got."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not 0 < value < float("inf"):  # also refuses nan
            raise argparse.ArgumentTypeError(f"{text!r} must be a positive, finite number")
        return value

    return parse


def build_service(
    folder: Path,
    postgres: str | None,
    replay_workers: int,
    ledger: str | None = None,
    waits: dict[str, float] | None = None,
    snapshot_every: int | None = None,
    snapshot_seconds: float | None = None,
) -> Any:
    """The service for a deployment folder, its ledger on file or on PostgreSQL.

    In PostgreSQL the ledger is named `ledger`, by default the steward's identifier, so
    several deployments can share one database; `waits` bounds its waits (`PostgresStore`'s
    `lock_timeout_s`, `statement_timeout_s`, `idle_in_transaction_s`), and the replicas
    must agree on pool.toml (its digest is checked in every append). A ledger file's lock
    is taken here, before replay: a second `pool serve` on the folder is refused at once
    (`LedgerLocked`, naming the pid that holds it), never left unready for ever.
    """
    from joulepool.deployment.actions import open_action_log
    from joulepool.deployment.config import (
        CONFIG,
        LEDGER,
        TOKENS,
        WITNESSES,
        config_digest,
        read_config,
    )
    from joulepool.deployment.open import open_pool, steward_keys
    from joulepool.pool import SNAPSHOT_EVERY, SNAPSHOT_SECONDS, Pool
    from joulepool.service.app import Service
    from joulepool.service.tokens import TokenBook, read_tokens
    from joulepool.service.transparency import origin_or_none

    config = read_config(folder / CONFIG)
    # The key in force after the deployment's rotation statements (DESIGN.md §4).
    keys = steward_keys(folder, config)
    # Scopes are checked against the tree being served: a token naming an entitlement it
    # does not have refuses the start (API.md, Tokens).
    tokens = TokenBook(read_tokens(folder / TOKENS, config.tree))
    digest = config_digest(config)
    held: Any = None
    if not postgres:
        from joulepool.stores.file import LedgerLock

        held = LedgerLock(folder / LEDGER)

    def opener() -> Pool:
        return open_pool(
            folder,
            config=config,
            keys=keys,
            postgres=postgres,
            ledger=ledger,
            waits=waits,
            config_digest=digest,
            lock=held,
            replay_workers=replay_workers,
            snapshot_every=SNAPSHOT_EVERY if snapshot_every is None else snapshot_every,
            snapshot_seconds=SNAPSHOT_SECONDS if snapshot_seconds is None else snapshot_seconds,
            who="pool serve",
        )

    return Service(
        opener,
        tokens,
        folder / WITNESSES,
        config_digest=digest,
        max_device_power_w=config.max_device_power_w,
        start_tree=config.tree,
        origin=origin_or_none(config),
        c2sp_witnesses=config.witnesses,
        claim_secret=_claim_secret_or_none(folder),
        runtime=config.runtime_policy,
        idle_acts=config.idle_acts_policy,
        preemption=config.preemption_policy,
        actions=open_action_log(folder),
    )


def _claim_secret_or_none(folder: Path) -> bytes | None:
    """The claim secret, made if absent; None, with a warning, where it cannot be made or
    is unsafe: the service runs, and only claims' own tokens are refused (API.md Run time)."""
    import logging

    from joulepool.deployment.claim_tokens import claim_secret
    from joulepool.errors import PoolError

    try:
        return claim_secret(folder)
    except (PoolError, OSError) as exc:
        logging.getLogger("joulepool.serve").warning(
            "claim tokens are off (progress needs an operator token): %s", exc
        )
        return None


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


def _check(args: argparse.Namespace) -> int:
    """`pool serve --check DIR` (docs/operations.md, "Checking before a start"): everything
    `pool serve` reads before it listens, read as it would read it, and nothing opened for
    writing: no ledger lock, no store, no socket, so it runs beside a serving process.
    A refusal is `pool: <code>: <what>` and exit 1, as every command's; else exit 0."""
    from joulepool.cli.paths import deployment_dir
    from joulepool.deployment.config import CONFIG, LEDGER, TOKENS, read_config
    from joulepool.deployment.open import steward_keys
    from joulepool.errors import InvalidInput
    from joulepool.service.tls import tls_context
    from joulepool.service.tokens import read_tokens

    folder = deployment_dir(args.dir)
    if args.ledger and not args.postgres:
        raise InvalidInput("--ledger", "names a ledger in PostgreSQL; add --postgres DSN")
    config = read_config(folder / CONFIG)
    key, _ = steward_keys(folder, config, read_only=True)
    tokens = read_tokens(folder / TOKENS, config.tree)
    # The same checks a start makes: the key's mode, the certificate's dates (§17).
    tls = tls_context(args.tls_cert, args.tls_key, args.tls_client_ca, int(time.time()))
    if not args.postgres:
        ledger = folder / LEDGER
        if not ledger.is_file():
            raise InvalidInput(str(ledger), "no ledger file: this folder was not made by pool init")
        with ledger.open("rb"):
            pass  # readable; `pool ledger verify` checks what it holds
    store = (
        f"PostgreSQL ledger {args.ledger or config.steward!r}" if args.postgres else "ledger file"
    )
    ceiling = (
        f"{config.max_device_power_w} W a device"
        if config.max_device_power_w is not None
        else "none (releases over 10x their reservation need override)"
    )
    expired = sum(1 for t in tokens if t.expired())
    print(
        f"pool serve --check: {folder}: ok: steward {key.kid!r}, {len(config.tree)} "
        f"entitlements, {len(tokens)} token(s){f' ({expired} expired)' if expired else ''}, "
        f"release ceiling {ceiling}, {store}, {'https' if tls else 'http'}"
    )
    return 0


def _serve(args: argparse.Namespace) -> int:
    if args.check:
        return _check(args)
    from joulepool.extras import require

    # Before anything is opened: a missing extra is one line naming it, and nothing else.
    require("serve", "pool serve")
    if args.postgres:
        require("postgres", "pool serve --postgres")
    from joulepool.cli.paths import deployment_dir
    from joulepool.errors import InvalidInput, PoolError
    from joulepool.service.app import create_app
    from joulepool.service.limits import (
        ConnectionLimits,
        Limits,
        connection_cap,
        raise_descriptor_limit,
    )
    from joulepool.service.tls import expiry_warning, tls_context

    folder = deployment_dir(args.dir)
    started_s = int(time.time())
    tls = tls_context(args.tls_cert, args.tls_key, args.tls_client_ca, started_s)
    if args.ledger and not args.postgres:
        raise InvalidInput("--ledger", "names a ledger in PostgreSQL; add --postgres DSN")
    log_config = _log_config(args.log_level)
    # Only `pool serve` configures logging: every other command's start skips its import.
    import logging.config

    logging.config.dictConfig(log_config)
    warning = None if tls is None else expiry_warning(tls, started_s)
    if warning is not None:
        logging.getLogger("joulepool.serve").warning("%s", warning)
    waits = {
        "lock_timeout_s": args.pg_lock_timeout_s,
        "statement_timeout_s": args.pg_statement_timeout_s,
        "idle_in_transaction_s": args.pg_idle_in_transaction_s,
    }
    try:
        service = build_service(
            folder,
            args.postgres,
            args.replay_workers,
            args.ledger,
            waits,
            snapshot_every=args.snapshot_every,
            snapshot_seconds=args.snapshot_seconds,
        )
    except PoolError as exc:
        # Every refusal to start is logged, and the process exits non-zero (no traceback).
        logging.getLogger("joulepool.serve").error("refusing to start: %s: %s", exc.code, exc)
        return 1
    _tune_collector(service)
    limits = Limits(args.max_body_bytes, args.body_timeout_s)
    descriptors = raise_descriptor_limit()
    connections = ConnectionLimits(
        connection_cap(args.max_connections, descriptors),
        args.header_timeout_s,
        args.max_header_bytes,
    )
    access = None if args.no_access_log else (sys.stderr, args.log_format)
    app = create_app(
        service,
        limits=limits,
        access_log=access,
        tls_not_after_s=None if tls is None else tls.not_after_s,
    )

    # SIGHUP wakes the reload thread and returns: the event loop never waits for a reload,
    # however long a replay under a new [period] takes (docs/reliability.md §15). Tokens
    # and pool.toml are each reloaded on their own; tokens.toml is also watched.
    from joulepool.service.reloads import Reloader

    reloader = Reloader(service, folder)
    service.stop_hooks.append(reloader.stop)

    def reload(_signum: int, _frame: object) -> None:
        reloader.request()

    signal.signal(signal.SIGHUP, reload)
    if args.host not in ("127.0.0.1", "::1", "localhost"):
        print(f"pool serve: listening on {args.host}, beyond loopback", file=sys.stderr)
    print(
        f"pool serve: {folder} on {'https' if tls else 'http'}://{args.host}:{args.port} "
        f"(pid {os.getpid()}){'; mutual TLS' if tls is not None and tls.mutual else ''}; "
        f"at most {connections.max_connections} connections, bodies of "
        f"{limits.max_body_bytes} bytes, headers within {connections.header_timeout_s:g} s",
        file=sys.stderr,
        flush=True,
    )
    reloader.start()
    try:
        _run_uvicorn(app, args, connections, log_config, tls)
    finally:
        reloader.stop()
    return 0


def _run_uvicorn(
    app: Any,
    args: argparse.Namespace,
    connections: Any,
    log_config: dict[str, Any],
    tls: Tls | None,
) -> None:
    """uvicorn, with the bounds `pool serve` promises (API.md)."""
    import uvicorn

    from joulepool.service.connections import bounded_protocol

    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        # TLS is done by the protocol, not uvicorn's `ssl_*`, so a connection counts against
        # the limits from its accept, its handshake included (docs/reliability.md §17).
        http=cast(Any, bounded_protocol(connections, None if tls is None else tls.context)),
        log_level=args.log_level,
        log_config=log_config,
        access_log=False,
        timeout_keep_alive=args.idle_timeout_s,
        # X-Forwarded-For from any loopback peer would set the client's address: at a
        # trust boundary the address is the socket's.
        proxy_headers=False,
        timeout_graceful_shutdown=5,
        # The bridge, the dashboard and the CLI reuse connections; uvicorn's own per-request
        # cap would answer 503 where the cap above already bounds what is held.
        limit_concurrency=None,
    )


def _log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging configuration, with the `joulepool` loggers on its handler, so
    refusals and store failures show in the same log, at `level` and above."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config: dict[str, Any] = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["joulepool"] = {
        "handlers": ["default"],
        "level": level.upper(),
        "propagate": False,
    }
    return config


def _token_add(args: argparse.Namespace) -> int:
    from joulepool.cli.paths import deployment_dir
    from joulepool.deployment.config import CONFIG, TOKENS, read_config
    from joulepool.errors import InvalidInput
    from joulepool.service.tokens import add_token, scope_problem

    folder = deployment_dir(args.dir)
    tree = read_config(folder / CONFIG).tree
    problem = scope_problem(args.scope, tree)
    if problem is not None:
        raise InvalidInput("--scope", f"{problem} (tree: {folder / CONFIG})")
    name = args.name or args.scope.replace(":", "-")
    expires = None
    if args.expires is not None:
        from joulepool.service.tokens import parse_expiry

        expires = parse_expiry(args.expires)
    token = add_token(folder / TOKENS, name, args.scope, tree, expires)
    out = {"name": name, "scope": args.scope, "token": token}
    if expires is not None:
        out["expires"] = expires.isoformat()
    emit(args, out, lambda c: c.print(token))
    return 0


def _token_list(args: argparse.Namespace) -> int:
    from joulepool.cli.paths import deployment_dir
    from joulepool.deployment.config import CONFIG, TOKENS, read_config
    from joulepool.service.tokens import read_tokens

    folder = deployment_dir(args.dir)
    entries = read_tokens(folder / TOKENS, read_config(folder / CONFIG).tree)

    def when(value: Any) -> str | None:
        return None if value is None else value.isoformat().replace("+00:00", "Z")

    # Names, scopes and dates only: the token is never stored, and its hash is not shown.
    rows = [
        {
            "name": e.name,
            "scope": e.scope,
            "created": when(e.created),
            "expires": when(e.expires),
            "state": "expired" if e.expired() else "active",
        }
        for e in entries
    ]

    def human(c: Any) -> None:
        from joulepool.cli.output import table

        c.print(
            table(
                f"{len(rows)} token(s) in {folder / TOKENS}",
                ["name", "scope", "created", "expires", "state"],
                [
                    [r["name"], r["scope"], r["created"], r["expires"] or "never", r["state"]]
                    for r in rows
                ],
            )
        )

    emit(args, {"tokens": rows}, human)
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    from joulepool.cli.paths import deployment_dir
    from joulepool.deployment.config import CONFIG, TOKENS, read_config
    from joulepool.errors import PoolError
    from joulepool.service.tokens import revoke_token

    folder = deployment_dir(args.dir)
    try:
        tree: Any = read_config(folder / CONFIG).tree
    except PoolError as exc:
        # A revoke must never wait for pool.toml to be mended (docs/reliability.md §15).
        print(f"pool: warning: {exc}; scopes not checked against the tree", file=sys.stderr)
        tree = None
    gone = revoke_token(folder / TOKENS, args.name, tree)
    emit(
        args,
        {"revoked": gone.name, "scope": gone.scope},
        lambda c: c.print(
            f"revoked token {gone.name!r} ({gone.scope}); a running pool serve stops taking it "
            "within a second"
        ),
    )
    return 0


def _reload(args: argparse.Namespace) -> int:
    """`pool reload DIR`: SIGHUP the `pool serve` running on DIR and wait for its word
    (docs/reliability.md §15)."""
    import time

    from joulepool.cli.paths import deployment_dir
    from joulepool.errors import ReloadRefused
    from joulepool.service.reloads import PID, STATUS, read_status

    folder = deployment_dir(args.dir)
    try:
        pid = int((folder / PID).read_text(encoding="ascii").strip())
    except FileNotFoundError:
        raise ReloadRefused(f"no pool serve is running on {folder} (no {PID})") from None
    except (OSError, ValueError) as exc:
        raise ReloadRefused(f"{folder / PID} names no process: {exc}") from None
    if pid <= 0:
        raise ReloadRefused(f"{folder / PID} names no process: {pid}")
    if not _is_pool_serve(pid):
        # A pid file left by a killed service may name a process that reused the number:
        # never signal that (SIGHUP ends most programs).
        raise ReloadRefused(
            f"{folder / PID} names pid {pid}, which is not running pool serve "
            "(pool serve was killed?)"
        )
    from joulepool.deployment.configs import note_reload_request

    # The reload names who asked for it (docs/reliability.md §18): a signal cannot. A
    # folder this user may not write in costs only the name: the reload says "unknown".
    with contextlib.suppress(OSError):
        note_reload_request(folder)
    sent = time.monotonic_ns()
    try:
        os.kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        raise ReloadRefused(
            f"{folder / PID} names pid {pid}, which is not running (pool serve was killed?)"
        ) from None
    except PermissionError:
        raise ReloadRefused(f"pid {pid} ({folder / PID}) is not ours to signal") from None
    deadline = time.monotonic() + args.timeout_s
    while True:
        status = read_status(folder)
        # Only a reload that began after this signal read the files as they are now.
        if status is not None and status.pid == pid and status.started_ns >= sent:
            break
        if time.monotonic() >= deadline:
            raise ReloadRefused(
                f"pid {pid} sent SIGHUP, and no outcome in {args.timeout_s:g} s "
                f"({folder / STATUS}); see its log"
            )
        time.sleep(0.05)
    if not status.ok:
        raise ReloadRefused(status.message)
    emit(
        args,
        {"reloaded": True, "pid": pid, "count": status.count},
        lambda c: c.print(f"reloaded (pool serve pid {pid})"),
    )
    return 0


def _is_pool_serve(pid: int) -> bool:
    """Whether `pid` runs `pool serve` (its command line, where /proc shows it; elsewhere
    only that it exists): what `pool reload` may signal (docs/reliability.md §15)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        if Path("/proc/self").exists():
            return False  # /proc is there and the process is not
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    except OSError:
        return False
    return b"serve" in args and any(b"joulepool" in a or a.endswith(b"pool") for a in args)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool serve` and `pool token`."""
    p = sub.add_parser("serve", help="run the admission service over HTTP (API.md)")
    p.add_argument("dir", metavar="DIR", help="the deployment folder")
    p.add_argument(
        "--check",
        action="store_true",
        help="check pool.toml, the key, tokens.toml and the TLS files as a start would, open "
        "nothing for writing, and exit: 0 when serve would start, 1 naming what is wrong",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port ({DEFAULT_PORT})")
    p.add_argument("--postgres", metavar="DSN", help="keep the ledger in PostgreSQL, for replicas")
    p.add_argument(
        "--ledger", metavar="NAME", help="the ledger's name in PostgreSQL (the steward's id)"
    )
    from joulepool.stores import PG_IDLE_IN_TRANSACTION_S, PG_LOCK_TIMEOUT_S, PG_STATEMENT_TIMEOUT_S

    p.add_argument(
        "--pg-lock-timeout-s",
        type=_positive(float),
        default=PG_LOCK_TIMEOUT_S,
        help="seconds to wait for another replica's ledger lock; then 503 "
        f"ledger_lock_timeout ({PG_LOCK_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--pg-statement-timeout-s",
        type=_positive(float),
        default=PG_STATEMENT_TIMEOUT_S,
        help=f"seconds one PostgreSQL statement may run ({PG_STATEMENT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--pg-idle-in-transaction-s",
        type=_positive(float),
        default=PG_IDLE_IN_TRANSACTION_S,
        help="seconds a replica may hold the ledger's lock idle (frozen) before PostgreSQL "
        f"ends its session and the others go on ({PG_IDLE_IN_TRANSACTION_S:g})",
    )
    p.add_argument(
        "--replay-workers",
        type=int,
        default=0,
        help="processes verifying the ledger at start-up (default 0: one per processor, up to 4)",
    )
    from joulepool.ledger import SNAPSHOT_EVERY, SNAPSHOT_SECONDS

    p.add_argument(
        "--snapshot-every",
        type=_positive(int),
        default=SNAPSHOT_EVERY,
        help=f"entries between state snapshots: a restart verifies and folds at most about "
        f"this many after the newest ({SNAPSHOT_EVERY})",
    )
    p.add_argument(
        "--snapshot-seconds",
        type=_positive(float),
        default=SNAPSHOT_SECONDS,
        help=f"seconds after which a commit seals a snapshot anyway ({SNAPSHOT_SECONDS:g})",
    )
    p.add_argument(
        "--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"]
    )
    from joulepool.service.limits import RESERVED_DESCRIPTORS, ConnectionLimits, Limits

    limits, connections = Limits(), ConnectionLimits()
    p.add_argument(
        "--max-body-bytes",
        type=_positive(int),
        default=limits.max_body_bytes,
        help=f"largest request body; larger is 413 ({limits.max_body_bytes})",
    )
    p.add_argument(
        "--body-timeout-s",
        type=_positive(float),
        default=limits.body_timeout_s,
        help=f"seconds a body may take to arrive; slower is 408 ({limits.body_timeout_s:g})",
    )
    p.add_argument(
        "--header-timeout-s",
        type=_positive(float),
        default=connections.header_timeout_s,
        help=f"seconds a request's headers may take; slower is 408 "
        f"({connections.header_timeout_s:g})",
    )
    p.add_argument(
        "--max-header-bytes",
        type=_positive(int),
        default=connections.max_header_bytes,
        help=f"largest request line and headers; larger is 431 ({connections.max_header_bytes})",
    )
    p.add_argument(
        "--idle-timeout-s",
        type=_positive(int),
        default=5,
        help="seconds an idle kept-alive connection stays open (5)",
    )
    p.add_argument(
        "--max-connections",
        type=_positive(int),
        default=connections.max_connections,
        help=f"connections held at once, at most the descriptor limit less "
        f"{RESERVED_DESCRIPTORS} ({connections.max_connections})",
    )
    p.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate (PEM)")
    p.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM)")
    p.add_argument(
        "--tls-client-ca",
        metavar="FILE",
        help="mutual TLS: accept only clients with a certificate from this CA (PEM)",
    )
    p.add_argument(
        "--log-format",
        choices=("human", "json"),
        default="human",
        help="the access log's lines on stderr: words, or one JSON object each (default: human)",
    )
    p.add_argument(
        "--no-access-log",
        action="store_true",
        help="no line per request (time, token name, method, path, status, claim, verdict)",
    )
    p.set_defaults(handler=_serve)

    r = sub.add_parser(
        "reload",
        help="have the pool serve running on DIR reload pool.toml and tokens.toml, and say "
        "whether it took them (exit 0) or refused them (exit 1, with its reason)",
    )
    r.add_argument("dir", metavar="DIR", help="the deployment folder")
    r.add_argument(
        "--timeout-s",
        type=_positive(float),
        default=120.0,
        help="seconds to wait for the outcome (a [period] change replays the ledger)",
    )
    add_json(r)
    r.set_defaults(handler=_reload)

    t = sub.add_parser("token", help="bearer tokens for pool serve")
    tsub = t.add_subparsers(dest="token_command", metavar="SUBCOMMAND", required=True)
    a = tsub.add_parser("add", help="create a token, print it once, store only its hash")
    a.add_argument("dir", metavar="DIR")
    a.add_argument(
        "--scope",
        required=True,
        help="'operator', 'metrics' (reads /metrics only), 'tenant:<entitlement id>', or "
        "'bridge' or 'bridge:<entitlement id>' (a workload manager's bridge: admits, reads, "
        "reports and releases claims, and nothing else)",
    )
    a.add_argument("--name", help="a name for the token (default: from the scope)")
    a.add_argument(
        "--expires",
        metavar="WHEN",
        help="when it stops working: 90d, 12h, 30m from now, or a date such as 2027-01-01 "
        "(default: never)",
    )
    add_json(a)
    a.set_defaults(handler=_token_add)

    a = tsub.add_parser("list", help="tokens by name, scope, created and expires (never a secret)")
    a.add_argument("dir", metavar="DIR")
    add_json(a)
    a.set_defaults(handler=_token_list)

    a = tsub.add_parser(
        "revoke", help="remove a token; a running pool serve drops it within a second"
    )
    a.add_argument("dir", metavar="DIR")
    a.add_argument("name", metavar="NAME")
    add_json(a)
    a.set_defaults(handler=_token_revoke)
