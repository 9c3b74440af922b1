"""`pool slurm build-node-zipapp OUT`: the node side of the bridge as one file that runs
under the system's Python with the standard library alone (`python3 -I OUT ...`).

slurmd's Prolog and Epilog run on every GPU node, and EpilogSlurmctld on the controller,
as root or SlurmUser, often with no virtual environment: the zipapp carries the modules
they import and nothing of the web, storage or plotting stack. Its commands:

    python3 -I pool-node.pyz prolog --state-dir DIR [--dcgm-url URL]   # slurmd's Prolog
    python3 -I pool-node.pyz epilog --state-dir DIR [--dcgm-url URL]   # slurmd's Epilog
    python3 -I pool-node.pyz ctld-epilog --config FILE [--job N]      # EpilogSlurmctld

It also carries prometheus-client (pure Python), whose parser checks a DCGM exporter's
text; the exporter is fetched with urllib (`joulepool.meters.prometheus`), not httpx.
`joulepool.grade.Energy` is a `msgspec.Struct`; the node only builds and adds figures,
never encodes them with msgspec, so the zipapp carries a stand-in `msgspec` (`Struct` as a
frozen dataclass, see `_MSGSPEC`) instead of the compiled library, which a zip cannot hold.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipapp
from pathlib import Path

import joulepool
from joulepool.bridges.slurm.config import BridgeConfigError
from joulepool.errors import MissingExtra

MODULES = (
    "__init__.py",
    "errors.py",
    "extras.py",
    "units.py",
    "checks.py",
    "grade.py",
    "attribution.py",
    "idle.py",
    "meters",
    "bridges/__init__.py",
    "bridges/slurm/__init__.py",
    "bridges/slurm/config.py",
    "bridges/slurm/jobs.py",
    "bridges/slurm/epilog.py",
    "bridges/slurm/gpu.py",
)
"""The package's files the node's commands import (the test runs each under `python3 -I`)."""
DEFAULT_INTERPRETER = "/usr/bin/python3 -I"

_MAIN = '''"""pool-node.pyz: the joulepool Slurm bridge's node side (docs/slurm.md)."""
import sys

USAGE = "usage: pool-node.pyz prolog|epilog [--state-dir DIR] [--dcgm-url URL] | ctld-epilog --config FILE [--job N]"


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in ("prolog", "epilog", "ctld-epilog"):
        print(USAGE, file=sys.stderr)
        return 2
    if sys.argv[1] == "ctld-epilog":
        from joulepool.bridges.slurm.epilog import main as ctld_epilog

        return ctld_epilog(sys.argv[2:])
    from joulepool.bridges.slurm.gpu import main as gpu

    return gpu(sys.argv[1:])


sys.exit(main())
'''

_MSGSPEC = '''"""A stand-in for msgspec inside pool-node.pyz: `Struct` alone, as joulepool.grade uses
it (frozen, fields in order, __post_init__, equality). Nothing here encodes or decodes."""
import dataclasses


class Struct:
    def __init_subclass__(cls, frozen=False, gc=True, **options):
        super().__init_subclass__()
        if options:
            raise TypeError(f"pool-node.pyz's msgspec stand-in: {sorted(options)} unsupported")
        dataclasses.dataclass(frozen=frozen)(cls)
'''


def _prometheus_client() -> Path:
    try:
        import prometheus_client
    except ImportError:
        raise MissingExtra(
            "pool slurm build-node-zipapp",
            "the [prometheus] extra",
            "pip install 'joulepool[prometheus]'",
            "prometheus_client is not installed",
        ) from None
    return Path(prometheus_client.__file__).resolve().parent


def build_node_zipapp(out: Path, interpreter: str = DEFAULT_INTERPRETER) -> Path:
    """Write the node zipapp to `out` (mode 0755) and return its path (docs/slurm.md,
    "Node-side install"; the Prolog/Epilog of §2.3's GPU figures and the §6.2 release)."""
    if not interpreter.startswith("/") or "\n" in interpreter:
        raise BridgeConfigError("--interpreter", "an absolute path, e.g. /usr/bin/python3 -I")
    package = Path(joulepool.__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="pool-node-") as tmp:
        root = Path(tmp)
        for rel in MODULES:
            src = package / rel
            dst = root / "joulepool" / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(src, dst)
        # The DCGM exporter's text is checked by prometheus-client's parser (pure Python).
        shutil.copytree(
            _prometheus_client(),
            root / "prometheus_client",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        (root / "msgspec").mkdir()
        (root / "msgspec" / "__init__.py").write_text(_MSGSPEC, encoding="utf-8")
        (root / "__main__.py").write_text(_MAIN, encoding="utf-8")
        out = out.resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        zipapp.create_archive(root, partial, interpreter=interpreter, compressed=True)
        os.chmod(partial, 0o755)  # noqa: S103 (an executable, like the scripts beside it)
        os.replace(partial, out)
    return out
