"""`pool keys vkey`, `pool ledger checkpoint` and `pool ledger tiles`: a deployment's ledger
as a C2SP transparency log (DESIGN.md §8, docs/transparency.md). Each works beside a
running `pool serve`: the ledger is opened as a reader."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from joulepool.cli.output import add_json, emit

if TYPE_CHECKING:
    from rich.console import Console


def _vkey(args: argparse.Namespace) -> int:
    from joulepool.deployment.checkpoints import verifier_keys
    from joulepool.deployment.config import CONFIG, read_config
    from joulepool.deployment.keys import deployment_keys

    folder = Path(args.dir)
    origin = read_config(folder / CONFIG).log_origin
    _, schedule = deployment_keys(folder, read_only=True)
    keys = verifier_keys(schedule, origin)
    shown = keys if args.all else keys[-1:]
    result = {
        "origin": origin,
        "vkey": keys[-1][1].encode(),
        "keys": [{"from_seq": start, "vkey": vkey.encode()} for start, vkey in keys],
    }

    def human(_c: Console) -> None:
        for start, vkey in shown:
            line = f"{start} {vkey.encode()}" if args.all else vkey.encode()
            sys.stdout.write(line + "\n")

    emit(args, result, human)
    return 0


def _checkpoint(args: argparse.Namespace) -> int:
    from joulepool.deployment.checkpoints import current_checkpoint
    from joulepool.deployment.config import CONFIG, read_config
    from joulepool.deployment.keys import deployment_keys
    from joulepool.deployment.open import open_pool

    folder = Path(args.dir)
    config = read_config(folder / CONFIG)
    origin = config.log_origin
    key, _ = deployment_keys(folder)
    pool = open_pool(folder, config=config, read_only=True)
    try:
        signed = current_checkpoint(pool, origin, key)
    finally:
        pool.close()
    result = {"origin": origin, "size": signed.size, "checkpoint": signed.text}

    def human(_c: Console) -> None:
        # The note itself, byte for byte: what a checker verifies, so no rich markup.
        sys.stdout.write(signed.text)

    emit(args, result, human)
    return 0


def _tiles(args: argparse.Namespace) -> int:
    from joulepool.deployment.checkpoints import write_tiles
    from joulepool.deployment.config import CONFIG, read_config
    from joulepool.deployment.keys import deployment_keys
    from joulepool.deployment.open import open_pool

    folder, out = Path(args.dir), Path(args.out)
    config = read_config(folder / CONFIG)
    origin = config.log_origin
    key, _ = deployment_keys(folder)
    pool = open_pool(folder, config=config, read_only=True)
    try:
        signed, files = write_tiles(pool, origin, key, out)
    finally:
        pool.close()
    result = {"out": str(out), "size": signed.size, "files": files, "checkpoint": signed.text}
    emit(
        args,
        result,
        lambda c: c.print(
            f"{out}: {files} tiles and entry bundles of {signed.size} entries, and the "
            f"checkpoint (c2sp.org/tlog-tiles)"
        ),
    )
    return 0


def register_keys(ksub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool keys vkey` (DESIGN.md §8, c2sp.org/signed-note)."""
    v = ksub.add_parser(
        "vkey",
        help="print the steward's signed-note verifier key (c2sp.org/signed-note), named by "
        "the checkpoint origin",
    )
    v.add_argument("dir", metavar="DIR")
    v.add_argument(
        "--all",
        action="store_true",
        help="every key the steward has held, each after the entry index from which it signs",
    )
    add_json(v)
    v.set_defaults(handler=_vkey)


def register_ledger(lsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool ledger checkpoint` and `pool ledger tiles` (DESIGN.md §8,
    c2sp.org/tlog-checkpoint, c2sp.org/tlog-tiles)."""
    c = lsub.add_parser(
        "checkpoint",
        help="print the ledger's signed checkpoint (c2sp.org/tlog-checkpoint)",
    )
    c.add_argument("dir", metavar="DIR")
    add_json(c)
    c.set_defaults(handler=_checkpoint)
    t = lsub.add_parser(
        "tiles",
        help="write the ledger as static C2SP tiles and its checkpoint (c2sp.org/tlog-tiles)",
    )
    t.add_argument("dir", metavar="DIR")
    t.add_argument("out", metavar="OUT", help="folder to write tile/... and checkpoint into")
    add_json(t)
    t.set_defaults(handler=_tiles)
