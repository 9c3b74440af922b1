"""Foreign COSE implementations for the interop tests, each in its own world:

- pycose 1.1.0 with cbor2 5.x in a virtual environment of its own under .cache/interop/
  (pycose 1.1.0 cannot decode under the cbor2 6 that joulepool uses), built the way
  benchmarks/replay.py builds its one;
- @auth0/cose, pinned by tests/interop/node/package-lock.json and installed with
  `npm ci` into tests/interop/node/node_modules. Its CBOR library, cbor-x, has an optional
  native speed-up, cbor-extract; package.json overrides that to 2.2.2, the newest release
  whose per-platform packages the registry holds (2.2.3's are missing there, and a lock
  without them fails `npm ci`), and `npm ci --omit=optional` leaves it out anyway;
- aics-tlog 0.2.1 (C2SP checkpoints, tiles and proofs) in a virtual environment of its own
  under .cache/interop/, installed with `pip install --ignore-requires-python`: it declares
  Python 3.12 but installs and runs on 3.11;
- aics-witness 0.1.0 (a c2sp.org/tlog-witness server, over aics-tlog 0.2.1), the same way,
  run as its own `aics-witness serve` process on 127.0.0.1.

Each is built once and reused: a file lock keeps two test sessions from building at once,
and a stamp written last marks a build as complete. Both are driven through a subprocess
speaking one JSON request and one JSON answer.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[2]
CACHE: Final = ROOT / ".cache" / "interop"
HERE: Final = Path(__file__).resolve().parent
NODE_DIR: Final = HERE / "node"
PYCOSE_REQUIREMENTS: Final = ("pycose==1.1.0", "cbor2>=5.4,<6")
PIP_QUIET: Final = ("--disable-pip-version-check",)
NPM_QUIET: Final = ("--no-audit", "--no-fund", "--loglevel=error")
NODE_MAJOR_MIN: Final = 18
INSTALL_TIMEOUT_S: Final = 600
RUN_TIMEOUT_S: Final = 120


class Unavailable(Exception):
    """A foreign implementation cannot be set up here; the message says what to install."""


@contextmanager
def _locked(name: str) -> Iterator[None]:
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _gist(text: str, lines: int = 4) -> str:
    """The first lines that name an error (npm prints its usage after them), else the last."""
    all_lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in all_lines if "error" in line.lower()]
    return " | ".join(errors[:lines] if errors else all_lines[-lines:])


def _run_json(argv: list[str], request: dict[str, Any], cwd: Path | None = None) -> dict[str, Any]:
    out = subprocess.run(
        argv,
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    if out.returncode != 0:
        raise AssertionError(f"{argv[0]} exited {out.returncode}: {out.stderr.strip()}")
    answer = json.loads(out.stdout)
    assert isinstance(answer, dict), answer
    return answer


class Pycose:
    """pycose 1.1.0 in its own virtual environment, driven through pycose_worker.py."""

    def __init__(self, python: Path) -> None:
        self.python = python

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        return _run_json([str(self.python), str(HERE / "pycose_worker.py")], request)

    def versions(self) -> dict[str, str]:
        code = (
            "import json, importlib.metadata as m; "
            "print(json.dumps({p: m.version(p) for p in ('pycose', 'cbor2')}))"
        )
        out = subprocess.run(
            [str(self.python), "-c", code], capture_output=True, text=True, check=True
        )
        versions = json.loads(out.stdout)
        assert isinstance(versions, dict)
        return {str(k): str(v) for k, v in versions.items()}


def _python_env(name: str, requirements: tuple[str, ...], pip_flags: tuple[str, ...] = ()) -> Path:
    """The Python of a virtual environment with `requirements` installed, built on first use
    under .cache/interop/<name>-venv, or `Unavailable` naming what to install."""
    env = CACHE / f"{name}-venv"
    python = env / "bin" / "python"
    stamp = env / ".joulepool-ready"
    wanted = "\n".join((*requirements, *pip_flags))
    with _locked(name):
        if stamp.exists() and python.exists() and stamp.read_text() == wanted:
            return python
        shutil.rmtree(env, ignore_errors=True)
        try:
            venv.create(env, with_pip=True, clear=True)
        except (subprocess.CalledProcessError, OSError) as exc:
            shutil.rmtree(env, ignore_errors=True)
            raise Unavailable(
                f"needs Python's venv with ensurepip to build {name}'s environment "
                f"(apt-get install python3-venv): {exc}"
            ) from None
        out = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *PIP_QUIET, *pip_flags, *requirements],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
        if out.returncode != 0:
            shutil.rmtree(env, ignore_errors=True)
            raise Unavailable(
                f"needs PyPI to `pip install {' '.join((*pip_flags, *requirements))}`: "
                f"pip failed: {_gist(out.stderr)}"
            )
        stamp.write_text(wanted)
    return python


def pycose() -> Pycose:
    """The pycose environment, built on first use under .cache/interop/pycose-venv."""
    return Pycose(_python_env("pycose", PYCOSE_REQUIREMENTS))


class NodeCose:
    """@auth0/cose under Node.js, driven through tests/interop/node/cose.mjs."""

    def __init__(self, node: str) -> None:
        self.node = node

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        return _run_json([self.node, str(NODE_DIR / "cose.mjs")], request, cwd=NODE_DIR)

    def installed_version(self, package: str) -> str:
        manifest = NODE_DIR / "node_modules" / package / "package.json"
        version = json.loads(manifest.read_text())["version"]
        assert isinstance(version, str)
        return version


def node_cose() -> NodeCose:
    """Node.js with the locked packages installed (`npm ci`, once per package-lock.json)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise Unavailable("needs Node.js and npm: apt-get install nodejs npm")
    major = subprocess.run(
        [node, "-p", "process.versions.node.split('.')[0]"],
        capture_output=True,
        text=True,
        check=False,
    )
    if major.returncode != 0 or int(major.stdout.strip() or 0) < NODE_MAJOR_MIN:
        raise Unavailable(
            f"needs Node.js {NODE_MAJOR_MIN} or newer (found {major.stdout.strip() or '?'}): "
            "apt-get install nodejs npm"
        )
    lock = (NODE_DIR / "package-lock.json").read_bytes()
    wanted = hashlib.sha256(lock).hexdigest()
    stamp = NODE_DIR / "node_modules" / ".joulepool-lock-sha256"
    with _locked("node"):
        if stamp.exists() and stamp.read_text() == wanted:
            return NodeCose(node)
        out = subprocess.run(
            # Optional packages are only cbor-x's native speed-up (built by an install script):
            # left out, cbor-x runs as plain JavaScript on every platform.
            [npm, "ci", "--omit=optional", "--ignore-scripts", *NPM_QUIET],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
            env={**os.environ, "NODE_ENV": "production"},
        )
        if out.returncode != 0:
            raise Unavailable(
                f"needs the npm registry for `npm ci` in {NODE_DIR.relative_to(ROOT)}: "
                f"{_gist(out.stderr)}"
            )
        stamp.write_text(wanted)
    return NodeCose(node)


# aics-tlog, a C2SP transparency-log library no one here wrote. It declares Python 3.12 but
# installs and runs on 3.11, hence --ignore-requires-python; it needs only `cryptography`.
AICS_TLOG_REQUIREMENTS: Final = ("aics-tlog==0.2.1",)
AICS_TLOG_PIP_FLAGS: Final = ("--ignore-requires-python",)


class AicsTlog:
    """aics-tlog in its own virtual environment, driven through aics_tlog_worker.py."""

    def __init__(self, python: Path) -> None:
        self.python = python

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        return _run_json([str(self.python), str(HERE / "aics_tlog_worker.py")], request)


def aics_tlog() -> AicsTlog:
    """The aics-tlog environment, built on first use under .cache/interop/aics-tlog-venv."""
    return AicsTlog(_python_env("aics-tlog", AICS_TLOG_REQUIREMENTS, AICS_TLOG_PIP_FLAGS))


# aics-witness, a C2SP tlog-witness server no one here wrote, over aics-tlog (pinned too, so
# a new aics-tlog cannot change what is tested); same Python 3.12 declaration as aics-tlog.
AICS_WITNESS_REQUIREMENTS: Final = ("aics-witness==0.1.0", "aics-tlog==0.2.1")


def aics_witness() -> Path:
    """The `aics-witness` command of its own environment, built on first use under
    .cache/interop/aics-witness-venv."""
    python = _python_env("aics-witness", AICS_WITNESS_REQUIREMENTS, AICS_TLOG_PIP_FLAGS)
    return python.parent / "aics-witness"


def aics_witness_cli(command: Path, folder: Path, *args: str) -> str:
    """Run `aics-witness ARGS --config FOLDER/witness.json` in FOLDER and return its output;
    its seed comes from the config, never from the caller's environment."""
    out = subprocess.run(
        [str(command), *args, "--config", str(folder / "witness.json")],
        capture_output=True,
        text=True,
        cwd=folder,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "WITNESS_SEED_HEX"},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout
