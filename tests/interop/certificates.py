"""Certificates made at test time for the TLS interop suites: two unrelated certificate authorities and
the certificates they issue, as PEM files for our nodes, nginx and the Python, JS and Go clients, and as
PKCS12 key stores and trust stores for the Java ones (Spring Boot's ``server.ssl.*`` and Spring Cloud's
``eureka.client.tls.*``, the Netflix client's ``javax.net.ssl.*``).

``make_pki(directory)`` writes everything under ``directory`` and returns a ``Pki``:

* ``ca``: the deployment's CA (``trustme``); every server and client certificate of the tests but one
  is issued by it, so it is the CA bundle the servers verify clients against and the clients verify
  servers against.
* ``server``: the certificate every server of a test presents (SCE, our nodes, nginx): SAN IP addresses
  127.0.0.1 to 127.0.0.5 and the DNS name ``localhost``. It serves as the servers' own client
  certificate too (SCE's ``eureka.client.tls.key-store``, our node's ``EUREKA_OUTBOUND_CERT_FILE``), so
  it names the peer identity ``PEER_URI`` first.
* ``orders``: an app's client certificate whose first SAN URI is ``ORDERS_URI``.
* ``payments``: another app's, identified by its subject CN only (no SAN), ``PAYMENTS_CN``.
* ``other_ca`` and ``stranger``: an unrelated CA and a certificate it issued (the same SANs as
  ``server``), which no server of the tests trusts.

Each ``Identity`` has its PEM chain (leaf first, then its CA) and key, a PKCS12 key store holding both
under the alias ``interop`` with ``STORE_PASSWORD``, and the leaf's DER bytes (what the serving layer
puts in ``environ["eureka.client_cert"]``). Each ``Authority`` has its PEM certificate and a PKCS12
trust store for Java holding it as a trusted-certificate entry (``pkcs12.serialize_java_truststore``:
the entry carries the attribute Java's PKCS12 key store needs to count a certificate as trusted).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Every key store and trust store of the tests; Java insists on a password for PKCS12 stores.
STORE_PASSWORD = "interop-Store-42"
KEY_ALIAS = "interop"

# The identities the certificates carry, which the tests map to API accounts (--certificate-name).
PEER_URI = "spiffe://interop.test/peer"
ORDERS_URI = "spiffe://interop.test/orders"
PAYMENTS_CN = "payments.interop.test"

# The loopback addresses the suites bind servers and clients to.
LOOPBACK_HOSTS = tuple(f"127.0.0.{n}" for n in range(1, 6))
VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class Identity:
    """A certificate and its key: PEM files, a PKCS12 key store, and the leaf's DER bytes."""

    name: str
    cert_file: Path  # the chain: the leaf, then its CA
    key_file: Path  # unencrypted PKCS8
    keystore: Path  # PKCS12: the key and the chain under KEY_ALIAS, STORE_PASSWORD
    der: bytes
    certificate: x509.Certificate


@dataclass(frozen=True)
class Authority:
    name: str
    ca: trustme.CA
    cert_file: Path  # PEM
    truststore: Path  # PKCS12 trust store for Java, STORE_PASSWORD
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey | object

    def issue(
        self,
        directory: Path,
        name: str,
        *,
        common_name: str,
        uris: tuple[str, ...] = (),
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
    ) -> Identity:
        """A leaf certificate for both TLS server and client use, with these SANs (none: no SAN
        extension at all, the subject CN alone names it)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=True,
                    data_encipherment=False,
                    key_agreement=True,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.certificate.public_key()),
                critical=False,
            )
        )
        names: list[x509.GeneralName] = [
            *(x509.UniformResourceIdentifier(uri) for uri in uris),
            *(x509.DNSName(host) for host in dns),
            *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips),
        ]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        cert_file = directory / f"{name}.crt"
        key_file = directory / f"{name}.key"
        keystore = directory / f"{name}.p12"
        cert_file.write_bytes(
            certificate.public_bytes(serialization.Encoding.PEM)
            + self.certificate.public_bytes(serialization.Encoding.PEM)
        )
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        keystore.write_bytes(
            pkcs12.serialize_key_and_certificates(
                KEY_ALIAS.encode(),
                key,
                certificate,
                [self.certificate],
                serialization.BestAvailableEncryption(STORE_PASSWORD.encode()),
            )
        )
        return Identity(
            name,
            cert_file,
            key_file,
            keystore,
            certificate.public_bytes(serialization.Encoding.DER),
            certificate,
        )


def authority(directory: Path, name: str) -> Authority:
    """A new CA (trustme's), its PEM certificate and its Java trust store, written under ``directory``."""
    ca = trustme.CA(organization_name=f"eureka interop {name}")
    certificate = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), password=None)
    cert_file = directory / f"{name}.crt"
    ca.cert_pem.write_to_path(str(cert_file))
    truststore = directory / f"{name}-truststore.p12"
    truststore.write_bytes(
        pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(certificate, name.encode())],
            serialization.BestAvailableEncryption(STORE_PASSWORD.encode()),
        )
    )
    return Authority(name, ca, cert_file, truststore, certificate, key)


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca: Authority
    server: Identity
    orders: Identity
    payments: Identity
    other_ca: Authority
    stranger: Identity


def make_pki(directory: Path) -> Pki:
    """Both CAs and every certificate of the suites, written under ``directory`` (made if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = authority(directory, "ca")
    other_ca = authority(directory, "other-ca")
    server_names = {"uris": (PEER_URI,), "dns": ("localhost",), "ips": LOOPBACK_HOSTS}
    return Pki(
        directory=directory,
        ca=ca,
        server=ca.issue(directory, "server", common_name="interop-server", **server_names),
        orders=ca.issue(directory, "orders", common_name="orders.interop.test", uris=(ORDERS_URI,)),
        payments=ca.issue(directory, "payments", common_name=PAYMENTS_CN),
        other_ca=other_ca,
        stranger=other_ca.issue(directory, "stranger", common_name="interop-server", **server_names),
    )
