"""API.md over TLS through the Slurm bridge: the bearer token never crosses the wire in clear.

`pool serve --tls-cert/--tls-key` speaks only TLS, with a certificate for 127.0.0.1 signed
by a CA made here (`cryptography`). job_submit.lua reaches it through LuaSec, the epilog and
the agent through Python's ssl; both verify the certificate against the configured CA
(`ca_file`) by default, and refuse a server their CA did not vouch for.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from joulepool.bridges.slurm.config import PoolUnreachable
from joulepool.bridges.slurm.jobs import PoolClient
from tests.service.test_tls import _certificate, _name, _write
from tests.support.slurm.bridge import Bridge, note_of, start_bridge

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]


def make_ca(folder: Path, name: str) -> tuple[Path, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _certificate(name, key, _name(name), key, ca=True)
    path, _ = _write(folder / name.replace(" ", "-"), key, cert)
    path.chmod(0o644)  # slurmctld's Lua reads it as SlurmUser
    return path, key


@pytest.fixture(scope="module")
def pki() -> Iterator[dict[str, Path]]:
    folder = Path(tempfile.mkdtemp(prefix="joulepool-pki-"))
    folder.chmod(0o755)
    ca, ca_key = make_ca(folder, "bridge test CA")
    key = ec.generate_private_key(ec.SECP256R1())
    server = _certificate("127.0.0.1", key, _name("bridge test CA"), ca_key, ca=False, server=True)
    cert, key_path = _write(folder / "server", key, server)
    other, _ = make_ca(folder, "some other CA")
    try:
        yield {"ca": ca, "cert": cert, "key": key_path, "other_ca": other}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def bridge(pki: dict[str, Path]) -> Iterator[Bridge]:
    b = start_bridge(tls=pki)
    try:
        yield b
    finally:
        b.close()
        shutil.rmtree(b.root, ignore_errors=True)


def test_api_job_is_admitted_and_released_over_verified_tls(bridge: Bridge) -> None:
    assert bridge.config.read_text().count('url = "https://127.0.0.1:') == 1
    job_id = bridge.submit(
        "-A", "phys", "--comment=pool:estimate=1MJ,grade=ModelBased", "--wrap", "sleep 1"
    )
    note = note_of(bridge.wait_job(job_id, lambda j: j.state == "COMPLETED"))
    assert note.state == "admitted"  # job_submit.lua's claim went over TLS
    actual = bridge.wait_released(note.claim)["actual"]  # and the epilog's release
    assert actual["grade"] == "ModelBased" and actual["uj"] > 0
    # pool serve answers nothing in clear, so no token was ever sent that way.
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{bridge.port}/readyz", timeout=2)


def test_api_a_server_the_ca_does_not_vouch_for_is_refused(
    bridge: Bridge, pki: dict[str, Path]
) -> None:
    # The agent would admit the held job at once with its own (right) CA: not yet.
    assert bridge.agent is not None
    bridge.agent.terminate()
    bridge.agent.wait(timeout=10)
    config = bridge.config.read_text()
    bridge.config.write_text(config.replace(str(pki["ca"]), str(pki["other_ca"])))
    try:
        held = bridge.sbatch("-A", "phys", "--comment=pool:estimate=1MJ", "--wrap", "true")
        assert held.returncode == 0, held.stderr
        # Fail-closed: the job waits, and the submitter is told why.
        assert "Pool is unreachable (TLS handshake" in held.stderr, held.stderr
        assert note_of(bridge.job(int(held.stdout.strip()))).state == "unreachable"
        client = PoolClient(
            f"https://127.0.0.1:{bridge.port}", bridge.deployment.operator, 5.0, pki["other_ca"]
        )
        with pytest.raises(PoolUnreachable, match="CERTIFICATE_VERIFY_FAILED"):
            client.ledger_length()
        # Without a CA file the system's CAs apply, which do not know this test CA either.
        bare = PoolClient(f"https://127.0.0.1:{bridge.port}", bridge.deployment.operator, 5.0)
        with pytest.raises(PoolUnreachable, match="CERTIFICATE_VERIFY_FAILED"):
            bare.ledger_length()
    finally:
        bridge.config.write_text(config)
    # With the right CA back, the agent admits it.
    job_id = int(held.stdout.strip())
    bridge.start_agent()
    bridge.wait_job(job_id, lambda j: j.state == "COMPLETED", timeout_s=60)
