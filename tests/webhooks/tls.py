"""A throwaway certificate authority and a server certificate for ``localhost`` (not for
127.0.0.1), made by the real ``openssl`` program, for the https receiver of the webhook
tests; the daemon is told to trust the authority by ``SSL_CERT_FILE``, as an operator
would for an internal CA."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
LEAF_EXT = """subjectAltName = DNS:localhost
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


@dataclass(frozen=True)
class Certs:
    ca: Path  # the authority's certificate (what SSL_CERT_FILE names)
    cert: Path  # the server's, for DNS:localhost
    key: Path

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, self.key)
        return ctx


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def make_certs(where: Path) -> Certs:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl program to make a test certificate authority")
    where.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=jobctl test CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=where)  # fmt: skip
    _openssl("req", *EC, "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=localhost",
             cwd=where)  # fmt: skip
    (where / "leaf.ext").write_text(LEAF_EXT)
    _openssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "leaf.pem", "-days", "2", "-extfile", "leaf.ext",
             cwd=where)  # fmt: skip
    return Certs(where / "ca.pem", where / "leaf.pem", where / "leaf.key")
