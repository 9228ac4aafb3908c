"""Which addresses a graph may make this machine contact: one classification for ``validate`` and the runtime.

A host is an IP literal when the system resolver would read it as one, in any spelling it accepts:
``127.0.0.1``, but also ``2130706433``, ``0x7f000001``, ``0177.0.0.1`` and ``127.1`` (the classic
``inet_aton`` forms), and IPv6 in brackets, with a zone or embedding an IPv4 address (mapped, 6to4,
NAT64 ``64:ff9b::/96``). Such a literal, ``localhost`` and the cloud metadata names are judged without
any lookup, so ``validate`` refuses them exactly as the runtime's guard
(:mod:`matpo_graph.tools.netguard`) does; other names are resolved, and checked, at call time.

Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["METADATA_HOSTS", "METADATA_IPS", "address_problem", "canonical_host", "host_problem", "http_url_problem", "parse_ip"]

METADATA_HOSTS = frozenset({"metadata", "metadata.google.internal", "metadata.goog", "instance-data"})
"""Cloud metadata endpoints reachable by name; their addresses are also covered by the IP rules."""
METADATA_IPS = frozenset({"169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254"})

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


def _inet_aton_part(text: str) -> int | None:
    if not text:
        return None
    lowered = text.lower()
    try:
        if lowered.startswith("0x"):
            return int(lowered[2:] or "0", 16)
        if len(text) > 1 and text.startswith("0"):
            return int(text, 8)
        return int(text, 10) if text.isdigit() else None
    except ValueError:
        return None


def _parse_ipv4_loose(host: str) -> ipaddress.IPv4Address | None:
    """IPv4 in the forms inet_aton accepts: 1 to 4 parts, each decimal, octal (leading 0) or hex (0x)."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or any(len(p) > 12 for p in parts):
        return None
    values = [_inet_aton_part(p) for p in parts]
    if any(v is None for v in values):
        return None
    *head, last = values
    if any(v > 255 for v in head) or last >= 1 << (8 * (5 - len(values))):  # type: ignore[operator]
        return None
    number = 0
    for v in head:
        number = (number << 8) | v  # type: ignore[operator]
    number = (number << (8 * (5 - len(values)))) | last  # type: ignore[operator]
    return ipaddress.IPv4Address(number)


def parse_ip(host: str) -> IPAddress | None:
    """The address `host` spells (see the module docstring), or None when it is a name."""
    h = host.strip().lower().rstrip(".")
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    h = h.split("%", 1)[0]  # an IPv6 zone
    if ":" in h:
        try:
            return ipaddress.IPv6Address(h)
        except ValueError:
            return None
    return _parse_ipv4_loose(h)


def canonical_host(host: str) -> str:
    """Lower-case name without the trailing dot, or the address in its standard spelling."""
    ip = parse_ip(host)
    return str(ip) if ip is not None else host.strip().lower().rstrip(".").strip("[]")


def address_problem(ip: str | IPAddress) -> str | None:
    """Why `ip` must not be contacted (e.g. 'loopback address'), or None for a public unicast address."""
    addr = ip if isinstance(ip, (ipaddress.IPv4Address, ipaddress.IPv6Address)) else parse_ip(str(ip))
    if addr is None:
        return "unparsable address"
    if isinstance(addr, ipaddress.IPv6Address):
        embedded = addr.ipv4_mapped or addr.sixtofour
        if embedded is None and addr in _NAT64:
            embedded = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
        if embedded is not None:
            return address_problem(embedded)
        if addr in _NAT64_LOCAL:
            return "private address"
        if addr.teredo is not None:
            return "tunnelled address"
    if str(addr) in METADATA_IPS:
        return "cloud metadata address"
    checks = (
        ("is_loopback", "loopback address"),
        ("is_link_local", "link-local address"),
        ("is_multicast", "multicast address"),
        ("is_unspecified", "unspecified address"),
        ("is_private", "private address"),
        ("is_reserved", "reserved address"),
    )
    for attr, reason in checks:
        if getattr(addr, attr):
            return reason
    if not addr.is_global:
        return "non-public address"
    return None


def host_problem(host: str) -> str | None:
    """What is known about `host` without resolving it: a metadata name, localhost, or a non-public
    literal gives the reason; a public literal or any other name gives None."""
    h = host.strip().lower().rstrip(".").strip("[]")
    if not h:
        return "the URL has no host"
    if h in METADATA_HOSTS:
        return f"{h} is a cloud metadata host"
    if h == "localhost" or h.endswith(".localhost"):
        return f"{h} is a loopback address"
    ip = parse_ip(h)
    if ip is None:
        return None
    problem = address_problem(ip)
    return f"{h} is a {problem} ({ip})" if problem else None


def http_url_problem(url: object) -> str | None:
    """None for an http(s) URL with a host (any case of the scheme), else what is wrong with it."""
    if not isinstance(url, str):
        return f"must be an http(s) URL, got {type(url).__name__}"
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 (raises for a port that is not a number)
    except ValueError as exc:
        return f"{url!r} is not a URL ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return f"must be an http(s) URL, got {url!r}"
    if not parts.hostname:
        return f"{url!r} has no host"
    if any(ord(c) < 33 or ord(c) == 127 for c in url.strip()):
        return f"{url!r} holds spaces or control characters"
    return None
