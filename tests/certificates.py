"""Self-signed certificates for TLS on loopback, made by ``openssl`` for a test or a benchmark."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

__all__ = ["CertificateUnavailable", "self_signed", "self_signed_or_skip"]

#: ``openssl req -newkey`` arguments of each kind of key.
_KEYS = {
    "rsa2048": ["-newkey", "rsa:2048"],
    "ecdsa_p256": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"],
}


class CertificateUnavailable(RuntimeError):
    """``openssl`` could not make the certificate (its message)."""


def self_signed(directory: Path, *, kind: str = "rsa2048") -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, valid a day, and its key, written in ``directory``
    (``<kind>.pem``, ``<kind>.key``). Raises :class:`CertificateUnavailable`."""
    cert, key = directory / f"{kind}.pem", directory / f"{kind}.key"
    made = subprocess.run(
        ["openssl", "req", "-x509", *_KEYS[kind], "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if made.returncode != 0:
        raise CertificateUnavailable(made.stderr.strip())
    return cert, key


def self_signed_or_skip(directory: Path) -> tuple[Path, Path]:
    """:func:`self_signed`, the test skipped where ``openssl`` cannot make it."""
    try:
        return self_signed(directory)
    except (CertificateUnavailable, FileNotFoundError) as exc:
        pytest.skip(f"openssl cannot make a certificate here: {exc}")
