"""TLS for `pool serve`: a certificate and key, and for mutual TLS the CA whose
client certificates are accepted (docs/reliability.md §17).

The files are checked here, before the service starts, so a wrong path, a key that does
not match its certificate, a key other users may read or a certificate out of date is one
line naming the file, not a traceback from inside the server or a service every client
refuses. The server context built here is the one `pool serve` serves with
(`service/connections.py` does the handshakes, under the connection limits).
"""

from __future__ import annotations

import datetime
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from joulepool.errors import CertificateOutOfDate, InvalidInput
from joulepool.ledger.keys import refuse_open_secret

EXPIRY_WARNING_S = 14 * 86_400
"""A certificate that expires within this many seconds of the start is logged as a warning."""

PEM_BEGIN = "-----BEGIN CERTIFICATE-----"
PEM_END = "-----END CERTIFICATE-----"


@dataclass(frozen=True, slots=True)
class Tls:
    """What `pool serve` serves HTTPS with: the context and the certificate's dates."""

    context: ssl.SSLContext
    cert: str
    not_before_s: int
    not_after_s: int
    mutual: bool


def _readable(path: str, flag: str) -> str:
    p = Path(path)
    if not p.exists():
        raise InvalidInput(flag, f"{path}: no such file")
    if not p.is_file():
        raise InvalidInput(flag, f"{path}: not a file")
    return path


def _private(path: str) -> str:
    """The key file, refused if group or others may read or change it (as the steward key)."""
    _readable(path, "--tls-key")
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise InvalidInput("--tls-key", f"{path}: cannot read: {exc.strerror}") from None
    refuse_open_secret(Path(path), mode, "a TLS private key")
    return path


def tls_context(cert: str | None, key: str | None, client_ca: str | None, now_s: int) -> Tls | None:
    """The server context for these files (None: plain HTTP), every file checked first.

    `now_s` (seconds since the epoch) is the instant the certificate must cover: one that
    expired, or is not valid yet, refuses the start (`CertificateOutOfDate`), since every
    client would refuse the service anyway and an operator would learn it from them.
    """
    if cert is None and key is None:
        if client_ca is not None:
            raise InvalidInput("--tls-client-ca", "needs --tls-cert and --tls-key")
        return None
    if cert is None or key is None:
        raise InvalidInput("--tls-cert", "give --tls-cert and --tls-key together")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(_readable(cert, "--tls-cert"), _private(key))
    except ssl.SSLError as exc:
        raise InvalidInput(
            "--tls-cert", f"{cert} with key {key}: not a certificate and its key ({exc.reason})"
        ) from None
    not_before, not_after = certificate_validity(cert)
    if now_s > not_after:
        raise CertificateOutOfDate(
            "--tls-cert", f"{cert}: the certificate expired on {utc(not_after)}; renew it"
        )
    if now_s < not_before:
        raise CertificateOutOfDate(
            "--tls-cert",
            f"{cert}: the certificate is not valid before {utc(not_before)} "
            f"(this machine's clock says {utc(now_s)})",
        )
    if client_ca is not None:
        try:
            context.load_verify_locations(_readable(client_ca, "--tls-client-ca"))
        except ssl.SSLError as exc:
            raise InvalidInput(
                "--tls-client-ca", f"{client_ca}: no CA certificate ({exc.reason})"
            ) from None
        # Mutual TLS: a client without a certificate from this CA never reaches HTTP.
        context.verify_mode = ssl.CERT_REQUIRED
    return Tls(context, cert, not_before, not_after, client_ca is not None)


def expiry_warning(tls: Tls, now_s: int) -> str | None:
    """The warning for a certificate that expires within `EXPIRY_WARNING_S`, or None."""
    left = tls.not_after_s - now_s
    if left > EXPIRY_WARNING_S:
        return None
    return (
        f"the TLS certificate {tls.cert} expires on {utc(tls.not_after_s)}, in "
        f"{left // 86_400} days {left % 86_400 // 3600} hours; renew it and restart pool serve"
    )


def utc(seconds: int) -> str:
    """An instant as RFC 3339 UTC, to the second."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.isoformat().replace("+00:00", "Z")


def certificate_validity(path: str) -> tuple[int, int]:
    """The first certificate's notBefore and notAfter (RFC 5280 §4.1.2.5), in seconds.

    Read from the DER with the few rules that reach `validity`, since the standard library
    checks dates only when it verifies a peer, and the core depends on no X.509 package.
    """
    try:
        text = Path(path).read_text("ascii", errors="replace")
    except OSError as exc:
        raise InvalidInput("--tls-cert", f"{path}: cannot read: {exc.strerror}") from None
    start = text.find(PEM_BEGIN)
    end = text.find(PEM_END, start)
    if start < 0 or end < 0:
        raise InvalidInput("--tls-cert", f"{path}: no PEM certificate")
    try:
        der = ssl.PEM_cert_to_DER_cert(text[start : end + len(PEM_END)])
        return _validity(der)
    except ValueError as exc:
        raise InvalidInput("--tls-cert", f"{path}: unreadable certificate ({exc})") from None


def _element(der: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start, end) of the content of the DER element at `at` (X.690 §8.1)."""
    if at + 2 > len(der):
        raise ValueError("truncated")
    tag, length = der[at], der[at + 1]
    at += 2
    if length & 0x80:
        count = length & 0x7F
        if not 0 < count <= 4 or at + count > len(der):
            raise ValueError("bad length")
        length = int.from_bytes(der[at : at + count], "big")
        at += count
    if at + length > len(der):
        raise ValueError("truncated")
    return tag, at, at + length


SEQUENCE, UTC_TIME, GENERALIZED_TIME, VERSION = 0x30, 0x17, 0x18, 0xA0


def _validity(der: bytes) -> tuple[int, int]:
    tag, at, _ = _element(der, 0)
    if tag != SEQUENCE:
        raise ValueError("not a certificate")
    tag, at, _ = _element(der, at)  # tbsCertificate
    if tag != SEQUENCE:
        raise ValueError("not a certificate")
    tag, start, end = _element(der, at)
    if tag == VERSION:
        tag, start, end = _element(der, end)
    for _field in ("signature", "issuer"):  # past the serial number, then these two
        tag, start, end = _element(der, end)
    tag, start, _ = _element(der, end)  # validity
    if tag != SEQUENCE:
        raise ValueError("no validity")
    first = _element(der, start)
    second = _element(der, first[2])
    return _time(der, first), _time(der, second)


def _time(der: bytes, element: tuple[int, int, int]) -> int:
    tag, start, end = element
    text = der[start:end].decode("ascii", errors="replace")
    if tag == UTC_TIME and len(text) == 13:
        # RFC 5280 §4.1.2.5.1: YY of 50 or more is 19YY, else 20YY.
        text = ("19" if int(text[:2]) >= 50 else "20") + text
    elif tag != GENERALIZED_TIME or len(text) != 15:
        raise ValueError("a validity time that is not UTCTime or GeneralizedTime")
    moment = datetime.datetime.strptime(text, "%Y%m%d%H%M%SZ").replace(tzinfo=datetime.UTC)
    return int(moment.timestamp())
