"""A private CA and a server certificate for the stack's NATS and Postgres when they
listen beyond loopback (``CORRAL_NATS_HOST``, ``CORRAL_PG_HOST``; one certificate for
the machine's one address): made once per ``CORRAL_HOME`` and kept, so nodes that joined
keep trusting it across restarts. Only the CA's certificate leaves the machine
(a node's join answer carries it); the keys stay here, 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_FOR = datetime.timedelta(days=825)


@dataclass(frozen=True)
class ServerTls:
    ca_file: Path
    cert_file: Path
    key_file: Path


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _names(host: str) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.DNSName(socket.gethostname())]
    for address in dict.fromkeys(["127.0.0.1", host]):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(address)))
        except ValueError:
            names.append(x509.DNSName(address))
    return names


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def server_tls(directory: Path, host: str) -> ServerTls:
    """The CA and server certificate in ``directory`` (made if missing) for ``host``."""
    files = ServerTls(directory / "ca.pem", directory / "server.pem", directory / "server-key.pem")
    if all(p.exists() for p in (files.ca_file, files.cert_file, files.key_file)):
        return files
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"Corral NATS CA ({socket.gethostname()})")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "corral-nats")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.SubjectAlternativeName(_names(host)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    _write_private(files.key_file, _key_pem(key))
    files.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return files
