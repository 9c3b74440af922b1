"""TLS: `pool serve --tls-cert FILE --tls-key FILE` (and `--tls-client-ca` for
mutual TLS), with a real certificate made here (`cryptography`) and a real TLS client
(httpx over the standard library's ssl); the custom protocol class keeps its limits."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import time
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.servers import Deployment, Serve, pool_cli, start_serve


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write(
    path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate
) -> tuple[Path, Path]:
    cert_path, key_path = path.with_suffix(".crt"), path.with_suffix(".key")
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    signer: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    server: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(signer, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it."""
    root = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("joulepool test CA", ca_key, _name("joulepool test CA"), ca_key, ca=True)
    ca_cert, _ = _write(root / "ca", ca_key, ca)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _certificate("127.0.0.1", server_key, ca.subject, ca_key, ca=False, server=True)
    server_cert, server_key_path = _write(root / "server", server_key, server)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _certificate("bridge", client_key, ca.subject, ca_key, ca=False)
    client_cert, client_key_path = _write(root / "client", client_key, client)
    return {
        "ca": ca_cert,
        "cert": server_cert,
        "key": server_key_path,
        "client_cert": client_cert,
        "client_key": client_key_path,
    }


def _wait_tls(serve: Serve, context: ssl.SSLContext) -> None:
    url = serve.url.replace("http://", "https://")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if serve.proc.poll() is not None:
            raise RuntimeError(serve.output())
        try:
            if httpx.get(f"{url}/readyz", verify=context, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError(serve.output())


def test_serve_over_tls_with_a_real_certificate(tmp_path: Path, pki: dict[str, Path]) -> None:
    d = Deployment.create(tmp_path / "d")
    serve = start_serve(
        d.folder, "--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"]), wait=False
    )
    try:
        trust = ssl.create_default_context(cafile=str(pki["ca"]))
        _wait_tls(serve, trust)
        url = serve.url.replace("http://", "https://")
        headers = {"Authorization": f"Bearer {d.operator}"}
        with httpx.Client(base_url=url, verify=trust, headers=headers) as c:
            r = c.post(
                "/v1/claims",
                json={
                    "id": "tls-1",
                    "entitlement": "vision",
                    "gang_size": 1,
                    "devices_per_member": 1,
                    "estimate": {"uj": 10**12, "grade": "HwShunt"},
                },
            )
            assert r.status_code == 200 and r.json()["verdict"] == "admit"
            # The bounded protocol still answers its limits over TLS.
            big = c.post(
                "/v1/claims", content=b"x" * (2 << 20), headers={"content-type": "application/json"}
            )
            assert big.status_code == 413
        # Plain HTTP to a TLS port gets no answer, and a client that does not trust the CA
        # refuses the server.
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{serve.url}/healthz", timeout=2)
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/healthz", timeout=2, verify=ssl.create_default_context())
        assert "https://" in serve.output()
    finally:
        serve.kill()


def test_mutual_tls_refuses_a_client_without_a_certificate(
    tmp_path: Path, pki: dict[str, Path]
) -> None:
    d = Deployment.create(tmp_path / "d")
    serve = start_serve(
        d.folder,
        "--tls-cert",
        str(pki["cert"]),
        "--tls-key",
        str(pki["key"]),
        "--tls-client-ca",
        str(pki["ca"]),
        wait=False,
    )
    try:
        with_cert = ssl.create_default_context(cafile=str(pki["ca"]))
        with_cert.load_cert_chain(str(pki["client_cert"]), str(pki["client_key"]))
        _wait_tls(serve, with_cert)
        url = serve.url.replace("http://", "https://")
        assert httpx.get(f"{url}/healthz", verify=with_cert, timeout=5).status_code == 200
        without = ssl.create_default_context(cafile=str(pki["ca"]))
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{url}/healthz", verify=without, timeout=5)
        assert "mutual TLS" in serve.output()
    finally:
        serve.kill()


def test_wrong_tls_files_are_one_line_naming_them(tmp_path: Path, pki: dict[str, Path]) -> None:
    d = Deployment.create(tmp_path / "d")
    missing = pool_cli(
        "serve",
        str(d.folder),
        "--tls-cert",
        str(tmp_path / "nope.crt"),
        "--tls-key",
        str(pki["key"]),
    )
    assert missing.returncode == 1 and "nope.crt: no such file" in missing.stderr
    swapped = pool_cli(
        "serve", str(d.folder), "--tls-cert", str(pki["cert"]), "--tls-key", str(pki["client_key"])
    )
    assert swapped.returncode == 1 and "not a certificate and its key" in swapped.stderr
    alone = pool_cli("serve", str(d.folder), "--tls-cert", str(pki["cert"]))
    assert alone.returncode == 1 and "together" in alone.stderr
    for r in (missing, swapped, alone):
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
