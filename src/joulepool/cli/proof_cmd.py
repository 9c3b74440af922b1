"""`pool proof check | follow`: a tenant's checks of the ledger as a C2SP transparency log
(DESIGN.md §8, docs/transparency.md)."""

from __future__ import annotations

import argparse
import hashlib
import os
import stat
import sys
import time
from pathlib import Path
from typing import Final

from joulepool.cli.output import add_json, emit, terminal_safe

MAX_BUNDLE_FILE: Final = 4 * 1024 * 1024
MAX_TOKEN_BYTES: Final = 4096


def _check(args: argparse.Namespace) -> int:
    from joulepool.transparency.errors import BundleMalformed
    from joulepool.transparency.logkeys import load_vkeys
    from joulepool.transparency.proof_bundle import MAX_BUNDLE_BYTES, check_bundle

    keys = load_vkeys(args.vkey)
    try:
        with Path(args.bundle).open("rb") as f:
            data = f.read(MAX_BUNDLE_BYTES + 1)
    except OSError as exc:
        raise BundleMalformed(args.bundle, f"cannot be read: {exc.strerror}") from None
    proven = check_bundle(data, keys)
    summary = proven.summary()

    kinds = ", ".join(f"{e.kind} at {e.index}" for e in proven.entries)
    recorded = "" if proven.ledger_claim == proven.claim else f" (as {proven.ledger_claim})"
    line = (
        f"claim {proven.claim}{recorded}: {kinds}; included in {proven.checkpoint.origin} "
        f"at size {proven.checkpoint.size}"
    )
    emit(args, summary, lambda c: c.print(line))
    return 0


def _token(path: str | None) -> str | None:
    from joulepool.errors import InvalidInput

    if path is None:
        return None
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            raw = f.read(MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise InvalidInput(path, f"cannot read the token file: {exc.strerror}") from None
    # A bearer token others can read is a token others hold (API.md, Tokens).
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidInput(path, f"mode {stat.S_IMODE(st.st_mode):04o}: must be 0600")
    token = raw.decode("utf-8", "replace").strip()
    if len(raw) > MAX_TOKEN_BYTES or not token or not token.isprintable() or " " in token:
        raise InvalidInput(path, "must hold one token on one line")
    return token


def _emit_line(args: argparse.Namespace, summary: dict[str, object], line: str) -> None:
    emit(args, summary, lambda c: c.print(line))


def default_state(url: str) -> Path:
    """Where `pool proof follow` keeps a log's checkpoint unless told: one file per URL
    under $XDG_STATE_HOME/joulepool (docs/transparency.md)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    name = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    return Path(base) / "joulepool" / f"checkpoint-{name}"


def _follow(args: argparse.Namespace) -> int:
    from joulepool.errors import InvalidInput
    from joulepool.ledger.note import ALG_COSIGNATURE_V1, VerifierKey
    from joulepool.transparency.errors import ForkAlarm, Unreachable
    from joulepool.transparency.follow import follow_round
    from joulepool.transparency.http import check_url
    from joulepool.transparency.logkeys import load_vkeys

    check_url(args.url)
    keys = load_vkeys(args.vkey)
    witnesses: tuple[VerifierKey, ...] = ()
    for value in args.witness_vkey or ():
        witnesses += load_vkeys(value, ALG_COSIGNATURE_V1, "--witness-vkey")
    if len({w.name for w in witnesses}) != len(witnesses):
        raise InvalidInput("--witness-vkey", "names one witness twice")
    quorum = args.cosigned if args.cosigned is not None else min(1, len(witnesses))
    if not 0 <= quorum <= len(witnesses):
        raise InvalidInput("--cosigned", f"must be in [0, {len(witnesses)}], the witnesses given")
    token = _token(args.token_file)
    if args.interval < 1:
        raise InvalidInput("--interval", "must be at least 1 second")
    state = Path(args.state) if args.state else default_state(args.url)
    if not args.state:
        state.parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            result = follow_round(
                args.url,
                keys,
                state,
                token=token,
                tiles=args.tiles,
                witnesses=witnesses,
                quorum=quorum,
            )
        except ForkAlarm as exc:
            print(f"pool: ALARM: {terminal_safe(exc.detail)}", file=sys.stderr)
            print(f"pool: the kept checkpoint stays in {state}", file=sys.stderr)
            return 5
        except Unreachable as exc:
            if args.once:
                raise
            # A log that is down for a round is not evidence of anything: try again.
            print(f"pool: {exc.code}: {terminal_safe(exc.detail)}", file=sys.stderr)
        else:
            said = (
                f"{result.outcome}: {result.kept.checkpoint.origin} at size "
                f"{result.kept.checkpoint.size}"
            )
            _emit_line(args, result.summary(), said)
            sys.stdout.flush()
        if args.once:
            return 0
        time.sleep(args.interval)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool proof check` and `pool proof follow` (docs/transparency.md)."""
    p = sub.add_parser("proof", help="check a claim's proof bundle; follow the log's checkpoints")
    proof = p.add_subparsers(dest="proof_command", metavar="PROOF_COMMAND", required=True)

    c = proof.add_parser(
        "check", help="verify a saved proof bundle offline (exit 0 when every proof verifies)"
    )
    c.add_argument("bundle", metavar="BUNDLE", help="the JSON of GET /v1/claims/{id}/proof")
    c.add_argument(
        "--vkey",
        required=True,
        metavar="V",
        help="the log's verifier key (pool keys vkey), or a file of such keys, one a line",
    )
    add_json(c)
    c.set_defaults(handler=_check)

    f = proof.add_parser(
        "follow",
        help="keep the log's last verified checkpoint; alarm (exit 5) on a rollback or fork",
    )
    f.add_argument("url", metavar="URL", help="the pool's base URL (GET URL/checkpoint)")
    f.add_argument("--vkey", required=True, metavar="V", help="as for `pool proof check`")
    f.add_argument(
        "--state",
        metavar="FILE",
        help="the kept checkpoint (default: $XDG_STATE_HOME/joulepool/checkpoint-<url hash>)",
    )
    f.add_argument("--token-file", metavar="F", help="a bearer token for /v1/proof/consistency")
    f.add_argument(
        "--tiles",
        action="store_true",
        help="compute consistency proofs from URL/tile/... instead of asking the server",
    )
    f.add_argument(
        "--witness-vkey",
        action="append",
        metavar="W",
        help="a C2SP witness's cosignature/v1 key, or a file of them (repeatable)",
    )
    f.add_argument(
        "--cosigned",
        type=int,
        metavar="N",
        help="accept a new checkpoint only when N of those witnesses cosign it "
        "(default: 1 when a witness key is given, else 0)",
    )
    f.add_argument("--once", action="store_true", help="one round, then exit")
    f.add_argument("--interval", type=int, default=60, help="seconds between rounds (60)")
    add_json(f)
    f.set_defaults(handler=_follow)
