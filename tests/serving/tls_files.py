"""Certificates made at test time (``trustme``) for nodes that serve HTTPS: the PEM files their
EUREKA_TLS_* settings name, and the client contexts that reach them.

``NodeTls.make(directory)`` makes a CA and a server certificate for 127.0.0.1 and localhost; ``env()``
is a node's environment for them (pass it to ``running_server`` with ``tls=node_tls.client_context()``);
``client_cert_files`` writes a client certificate of a CA; ``rotate`` replaces the server's files with a
new certificate, as cert-manager does.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme

SERVER_NAMES = ("127.0.0.1", "localhost")


def write_leaf(cert: trustme.LeafCert, directory: Path, stem: str) -> tuple[Path, Path]:
    """``cert``'s chain (its own first) and key as PEM files ``stem.crt`` and ``stem.key``."""
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    key_path.write_bytes(cert.private_key_pem.bytes())
    return cert_path, key_path


@dataclass
class NodeTls:
    """A CA, the node's certificate files and the CA's own PEM (trusted by clients, and the bundle
    client certificates are verified against)."""

    ca: trustme.CA
    directory: Path
    cert_file: Path
    key_file: Path
    ca_file: Path

    @classmethod
    def make(cls, directory: Path) -> NodeTls:
        directory.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        cert_file, key_file = write_leaf(ca.issue_cert(*SERVER_NAMES), directory, "server")
        ca_file = directory / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        return cls(ca, directory, cert_file, key_file, ca_file)

    def env(self, client_auth: str = "none") -> dict[str, str]:
        env = {"EUREKA_TLS_CERT_FILE": str(self.cert_file), "EUREKA_TLS_KEY_FILE": str(self.key_file)}
        if client_auth != "none":
            env |= {"EUREKA_TLS_CLIENT_AUTH": client_auth, "EUREKA_TLS_CLIENT_CA_FILE": str(self.ca_file)}
        return env

    def client_context(self, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
        """A client context trusting the node's CA, presenting ``cert`` (files) when given."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if cert is not None:
            context.load_cert_chain(str(cert[0]), str(cert[1]))
        return context

    def client_cert_files(self, name: str, ca: trustme.CA | None = None, **options) -> tuple[Path, Path]:
        """Files of a client certificate for ``name`` (a DNS name, a URI, an email) of ``ca`` (this CA
        unless given); ``options`` go to ``issue_cert`` (``not_after=`` for an expired one)."""
        cert = (ca or self.ca).issue_cert(name, **options)
        return write_leaf(cert, self.directory, f"client-{abs(hash((name, id(cert))))}")

    def rotate(self) -> trustme.LeafCert:
        """New certificate files for the same names (same CA), each replaced by a rename, as cert-manager
        and kubelet do (the key last: a moment where the two do not match is part of the test)."""
        cert = self.ca.issue_cert(*SERVER_NAMES)
        new_cert, new_key = write_leaf(cert, self.directory, "server-next")
        os.replace(new_cert, self.cert_file)
        os.replace(new_key, self.key_file)
        return cert
