"""TLS: `pool serve --tls-cert FILE --tls-key FILE` (and `--tls-client-ca` for
mutual TLS), with a real certificate made here (`cryptography`) and a real TLS client
(httpx over the standard library's ssl); the custom protocol class keeps its limits."""

from __future__ import annotations

import datetime
import ipaddress
import resource
import socket
import ssl
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from joulepool.errors import InvalidInput
from joulepool.service.tls import PEM_BEGIN, PEM_END, certificate_validity
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
    valid: tuple[datetime.timedelta, datetime.timedelta] = (
        datetime.timedelta(minutes=-5),
        datetime.timedelta(days=1),
    ),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + valid[0])
        .not_valid_after(now + valid[1])
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


# -- the TLS files an operator gives: modes and dates --------------------------------------


def _self_signed(
    root: Path, name: str, valid: tuple[datetime.timedelta, datetime.timedelta]
) -> tuple[Path, Path]:
    """A server certificate for 127.0.0.1 valid over `valid` (offsets from now), and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _certificate(
        "127.0.0.1", key, _name("127.0.0.1"), key, ca=False, server=True, valid=valid
    )
    return _write(root / name, key, cert)


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o666, 0o604, 0o620])
def test_a_tls_key_other_users_may_read_or_change_refuses_the_start(
    tmp_path: Path, pki: dict[str, Path], mode: int
) -> None:
    d = Deployment.create(tmp_path / "d")
    key = tmp_path / "server.key"
    key.write_bytes(pki["key"].read_bytes())
    key.chmod(mode)
    line = _one_line(
        pool_cli("serve", str(d.folder), "--tls-cert", str(pki["cert"]), "--tls-key", str(key))
    )
    # The steward key's refusal, word for word: one rule, one fix.
    assert line == (
        f"pool: key_file: {key}: a TLS private key with mode {mode:04o} is open to other users; "
        f"run `chmod 600 {key}`"
    )


def test_an_expired_or_not_yet_valid_certificate_refuses_the_start(tmp_path: Path) -> None:
    d = Deployment.create(tmp_path / "d")
    day = datetime.timedelta(days=1)
    expired, expired_key = _self_signed(tmp_path, "expired", (-30 * day, -day))
    line = _one_line(
        pool_cli("serve", str(d.folder), "--tls-cert", str(expired), "--tls-key", str(expired_key))
    )
    ended = datetime.datetime.now(datetime.UTC) - day
    assert line.startswith(f"pool: certificate_out_of_date: --tls-cert: {expired}: ")
    assert f"expired on {ended:%Y-%m-%d}T" in line
    early, early_key = _self_signed(tmp_path, "early", (2 * day, 30 * day))
    line = _one_line(
        pool_cli("serve", str(d.folder), "--tls-cert", str(early), "--tls-key", str(early_key))
    )
    begins = datetime.datetime.now(datetime.UTC) + 2 * day
    assert line.startswith(f"pool: certificate_out_of_date: --tls-cert: {early}: ")
    assert f"not valid before {begins:%Y-%m-%d}T" in line


def test_certificate_dates_are_read_in_both_encodings_and_garbage_is_one_typed_error(
    tmp_path: Path,
) -> None:
    # RFC 5280: UTCTime through 2049, GeneralizedTime from 2050 on; `cryptography` follows it.
    key = ec.generate_private_key(ec.SECP256R1())
    utc = datetime.UTC
    for name, begins, ends in (
        (
            "utc",
            datetime.datetime(1999, 12, 31, 23, 59, 59, tzinfo=utc),
            datetime.datetime(2049, 12, 31, tzinfo=utc),
        ),
        (
            "generalized",
            datetime.datetime(2050, 1, 1, tzinfo=utc),
            datetime.datetime(2107, 6, 30, 12, tzinfo=utc),
        ),
    ):
        now = datetime.datetime.now(datetime.UTC)
        cert = _certificate("x", key, _name("x"), key, ca=False, valid=(begins - now, ends - now))
        path, _ = _write(tmp_path / name, key, cert)
        validity = certificate_validity(str(path))
        assert validity == (int(begins.timestamp()), int(ends.timestamp()))
    for name, text in (
        ("empty", ""),
        ("not-pem", "hello"),
        ("bad-base64", f"{PEM_BEGIN}\n!!!!\n{PEM_END}\n"),
        ("truncated", f"{PEM_BEGIN}\nMIIBkTCB+6ADAgECAhQ=\n{PEM_END}\n"),
        ("not-a-sequence", f"{PEM_BEGIN}\nAgEB\n{PEM_END}\n"),
    ):
        path = tmp_path / f"{name}.crt"
        path.write_text(text)
        with pytest.raises(InvalidInput, match=f"--tls-cert: {path}: "):
            certificate_validity(str(path))


def test_a_certificate_near_its_end_starts_with_a_warning_and_its_end_is_a_metric(
    tmp_path: Path,
) -> None:
    day = datetime.timedelta(days=1)
    anyone = ssl.create_default_context()
    anyone.check_hostname, anyone.verify_mode = False, ssl.CERT_NONE
    # Half an hour short of 3 days, so the warning's hours do not hang on a second's rounding.
    soon = 3 * day - datetime.timedelta(minutes=30)
    for name, ends, warned in (("soon", soon, True), ("later", 30 * day, False)):
        d = Deployment.create(tmp_path / name)
        cert, key = _self_signed(tmp_path, name, (-day, ends))
        assert key.stat().st_mode & 0o777 == 0o600  # the mode a key must have: accepted
        serve = start_serve(d.folder, "--tls-cert", str(cert), "--tls-key", str(key), wait=False)
        try:
            _wait_tls(serve, anyone)
            output = serve.output()
            metrics = httpx.get(
                f"{serve.url.replace('http://', 'https://')}/metrics",
                headers={"Authorization": f"Bearer {d.operator}"},
                verify=anyone,
                timeout=10,
            ).text
        finally:
            serve.kill()
        # The end an alert reads, while the service runs: the certificate's own notAfter.
        not_after = x509.load_pem_x509_certificate(cert.read_bytes()).not_valid_after_utc
        expiry = [
            line.split()[1]
            for line in metrics.splitlines()
            if line.startswith("pool_tls_certificate_expiry_timestamp_seconds ")
        ]
        assert expiry and float(expiry[0]) == int(not_after.timestamp()), metrics
        end = datetime.datetime.now(datetime.UTC) + ends
        warning = [line for line in output.splitlines() if "expires on" in line]
        if warned:
            assert len(warning) == 1, output
            assert str(cert) in warning[0] and f"{end:%Y-%m-%d}T" in warning[0]
            assert "in 2 days 23 hours" in warning[0] and warning[0].startswith("WARNING")
        else:
            assert warning == [], output


# -- connections in a handshake: counted and bounded from their accept ---------------------


def test_a_silent_or_stalled_tls_handshake_is_closed_within_the_header_timeout(
    tmp_path: Path, pki: dict[str, Path]
) -> None:
    d = Deployment.create(tmp_path / "d")
    serve = start_serve(
        d.folder,
        "--tls-cert",
        str(pki["cert"]),
        "--tls-key",
        str(pki["key"]),
        "--header-timeout-s",
        "1",
        wait=False,
    )
    port = int(serve.url.rsplit(":", 1)[1])
    try:
        _wait_tls(serve, ssl.create_default_context(cafile=str(pki["ca"])))
        # Nothing at all, then the first bytes of a ClientHello and nothing more.
        for first in (b"", b"\x16\x03\x01\x02\x00\x01"):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                started = time.monotonic()
                s.sendall(first)
                try:
                    got = s.recv(1024)
                except ConnectionResetError:
                    got = b""
                waited = time.monotonic() - started
            assert got == b"", got
            assert 0.9 < waited < 5, waited
            print(f"handshake opened with {len(first)} bytes closed after {waited:.2f} s")
    finally:
        serve.kill()


def test_a_flood_of_silent_tls_connections_past_the_descriptor_limit_locks_nobody_out(
    tmp_path: Path, pki: dict[str, Path]
) -> None:
    """1,100 TCP connections that never begin a handshake, under a 1,024-descriptor limit:
    each HTTPS request is still answered, as each plain HTTP one is."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1400:
        pytest.fail(f"this test needs 1,400 descriptors; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1400), hard))
    d = Deployment.create(tmp_path / "d")
    serve = start_serve(
        d.folder,
        "--tls-cert",
        str(pki["cert"]),
        "--tls-key",
        str(pki["key"]),
        wait=False,
        nofile=1024,
    )
    port = int(serve.url.rsplit(":", 1)[1])
    trust = ssl.create_default_context(cafile=str(pki["ca"]))
    silent: list[socket.socket] = []
    try:
        _wait_tls(serve, trust)
        assert "at most 896 connections" in serve.output()
        for _ in range(1100):
            silent.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        answered, latencies = 0, []
        for i in range(10):
            # A new connection each time, as each new client would open one.
            with httpx.Client(
                base_url=serve.url.replace("http://", "https://"),
                verify=trust,
                headers={"Authorization": f"Bearer {d.operator}"},
                timeout=10,
            ) as c:
                started = time.monotonic()
                r = c.post(
                    "/v1/claims",
                    json={
                        "id": f"flood-{i}",
                        "entitlement": "vision",
                        "gang_size": 1,
                        "devices_per_member": 1,
                        "estimate": {"uj": 1000, "grade": "HwShunt"},
                    },
                )
                latencies.append(time.monotonic() - started)
                answered += r.status_code == 200
        assert answered == 10, serve.output()
        # Eviction made the room, not the handshake deadline (10 s) running out.
        assert max(latencies) < 5, latencies
        assert serve.proc.poll() is None
        # Hostile handshakes end connections, not the log: no traceback, no error line.
        assert "Traceback" not in serve.output() and "ERROR" not in serve.output()
        # The oldest silent connections made the room: closed by the service.
        closed = sum(1 for s in silent if _closed_by_peer(s))
        assert closed >= 1100 - 896, closed
        print(f"answered {answered}/10, slowest {max(latencies):.3f} s, {closed} closed")
    finally:
        for s in silent:
            s.close()
        serve.kill()


def _closed_by_peer(s: socket.socket) -> bool:
    s.settimeout(0)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
