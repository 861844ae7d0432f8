"""Client certificates: the names that may identify an API account. Plain Python and ``cryptography``.

A certificate comes either from the TLS connection itself (the server puts the verified certificate's
DER bytes in the WSGI environ, ``eureka.client_cert``) or from the header a TLS-terminating proxy
sets (``EUREKA_CLIENT_CERT_HEADER``): Envoy's ``x-forwarded-client-cert`` (XFCC: elements of
``Key=value`` pairs, ``Cert="<url-encoded PEM>"``) or nginx's ``$ssl_client_escaped_cert`` (a
url-encoded PEM). Whether a header is believed is decided by the caller (registry/access/drf.py): only
a trusted proxy's.

A certificate names its holder by its SAN URIs (a SPIFFE ID), its SAN DNS names, then its subject's
common names, tried in that order against the accounts' certificate names. Parsing costs far more
than a heartbeat, and a fleet sends the same few certificates again and again: the names are
remembered by the SHA-256 of what was parsed (the DER bytes or the header's value), a bounded map.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import unquote

from cryptography import x509
from cryptography.x509.oid import NameOID

# A header longer than this is not parsed: a certificate chain of a few certificates fits easily.
MAX_HEADER_CHARS = 65_536
# Distinct certificates whose names are remembered; past it the oldest are forgotten first.
PARSED_MAX_ENTRIES = 4_096

ENVIRON_KEY = "eureka.client_cert"


class BadCertificate(ValueError):
    """What was given is no certificate (or a header in no format known here); the message says why."""


@dataclass(frozen=True)
class ClientCertificate:
    """The names a client certificate identifies its holder by, most specific first."""

    # What verdicts about it are remembered by (the credential cache): a digest of what was parsed.
    key: bytes
    names: tuple[str, ...]
    # Where it came from, for the log: "TLS" or "header from 10.0.0.5".
    source: str


def names_of_der(der: bytes) -> tuple[str, ...]:
    """SAN URIs, then SAN DNS names, then the subject's common names of a DER certificate."""
    try:
        certificate = x509.load_der_x509_certificate(der)
    except ValueError as exc:
        raise BadCertificate(f"not a DER certificate ({exc})") from None
    return _names(certificate)


def _names(certificate: x509.Certificate) -> tuple[str, ...]:
    names: list[str] = []
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        san = None
    except ValueError as exc:  # a malformed extension
        raise BadCertificate(f"unreadable certificate extensions ({exc})") from None
    if san is not None:
        names += san.get_values_for_type(x509.UniformResourceIdentifier)
        names += san.get_values_for_type(x509.DNSName)
    try:
        common = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    except ValueError as exc:
        raise BadCertificate(f"unreadable certificate subject ({exc})") from None
    names += [str(attribute.value) for attribute in common]
    return tuple(name for name in names if name)


def _names_of_pem(pem: str) -> tuple[str, ...]:
    try:
        certificate = x509.load_pem_x509_certificate(pem.encode("ascii", "replace"))
    except ValueError as exc:
        raise BadCertificate(f"not a PEM certificate ({exc})") from None
    return _names(certificate)


def _split_outside_quotes(text: str, separator: str) -> list[str]:
    """``text`` split at each ``separator`` that is not inside a double-quoted value (``\\"`` escapes
    a quote inside one): XFCC subjects hold commas and semicolons."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def _unquote_value(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return value


_SUBJECT_CN = re.compile(r"(?:^|[,/])\s*CN=((?:\\.|[^,/+])+)", re.IGNORECASE)


def _names_of_xfcc(element: str) -> tuple[str, ...]:
    """The names of one XFCC element: its certificate's when it carries one (``Cert=``), else its
    ``URI=``, ``DNS=`` and the CN of its ``Subject=``, in that order."""
    fields: dict[str, list[str]] = {}
    for pair in _split_outside_quotes(element, ";"):
        key, equals, value = pair.partition("=")
        if not equals:
            continue
        fields.setdefault(key.strip().lower(), []).append(_unquote_value(value))
    if "cert" in fields:
        return _names_of_pem(unquote(fields["cert"][0]))
    names = [*fields.get("uri", ()), *fields.get("dns", ())]
    for subject in fields.get("subject", ()):
        names += [match.group(1).strip() for match in _SUBJECT_CN.finditer(subject)]
    if not names:
        raise BadCertificate("an XFCC element with neither Cert, URI, DNS nor a Subject CN")
    return tuple(name for name in names if name)


def names_of_header(value: str) -> tuple[str, ...]:
    """The names of the certificate a proxy's header carries: nginx's url-encoded PEM, or Envoy's XFCC,
    whose last element is the one the nearest proxy (the one trusted) added."""
    if len(value) > MAX_HEADER_CHARS:
        raise BadCertificate(f"a certificate header longer than {MAX_HEADER_CHARS} characters")
    decoded = unquote(value).strip()
    if decoded.startswith("-----BEGIN"):
        return _names_of_pem(decoded)
    elements = [element for element in _split_outside_quotes(value, ",") if element.strip()]
    if not elements or "=" not in elements[-1]:
        raise BadCertificate("neither a url-encoded PEM certificate nor an XFCC header")
    return _names_of_xfcc(elements[-1])


class ParsedNames:
    """Names (or the reason they could not be read) by the SHA-256 of what was parsed, at most
    ``max_entries`` of them, the least recently used forgotten first."""

    def __init__(self, max_entries: int = PARSED_MAX_ENTRIES):
        self.max_entries = max_entries
        self._entries: OrderedDict[bytes, tuple[str, ...] | str] = OrderedDict()
        self._lock = threading.Lock()
        # Parses actually made (for tests: a certificate seen again is not parsed again).
        self.parsed = 0

    def get(self, key: bytes, parse) -> tuple[str, ...]:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is None:
            self.parsed += 1
            try:
                entry = parse()
            except BadCertificate as exc:
                entry = str(exc)
            with self._lock:
                self._entries[key] = entry
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
        if isinstance(entry, str):
            raise BadCertificate(entry)
        return entry

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


parsed_names = ParsedNames()


def from_der(der: bytes) -> ClientCertificate:
    """The certificate the TLS connection verified (``environ["eureka.client_cert"]``)."""
    key = hashlib.sha256(b"der:" + der).digest()
    return ClientCertificate(key, parsed_names.get(key, lambda: names_of_der(der)), "TLS")


def from_header(value: str, proxy: str) -> ClientCertificate:
    """The certificate a trusted proxy (at ``proxy``) passed in its header."""
    key = hashlib.sha256(b"header:" + value.encode("utf-8", "surrogatepass")).digest()
    names = parsed_names.get(key, lambda: names_of_header(value))
    return ClientCertificate(key, names, f"header from {proxy}")


def normalise_name(name: str) -> str:
    """Certificate names compare without regard to case (DNS names and URI schemes and hosts do not
    care, and no two accounts may hold names that differ in case only)."""
    return name.strip().casefold()
