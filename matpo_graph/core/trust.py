"""What a graph file may make this machine do: run code, send secrets, reach private addresses.

Graphs may come from strangers, so a graph can *name* code, secrets and addresses but never grant
itself permission to use them. Permission comes from the user, through a :class:`TrustPolicy`
built from the command line (``--trust-code``, ``--trust-module``, ``--allow-secret``,
``--allow-host``), the environment (``MATPO_GRAPH_TRUST_CODE``, ``MATPO_GRAPH_ALLOW_SECRETS``,
``MATPO_GRAPH_ALLOW_HOSTS``) or the user's own config file, never from the graph. This is
``trust_remote_code`` for graphs:

- **Code** named as ``'package.module:function'`` (python tools, credit strategies, reward scorers)
  runs only when the policy trusts it: the project's built-ins (:data:`BUILTIN_CODE`) always, other
  code when the user trusts all code, the module (or a package above it), or the folder it is
  installed in.
- **Secrets**: a graph may name an environment variable (``api_key_env``) only when the user granted
  that variable *for that endpoint* (``NAME=https://host``); keys go over https only, except to the
  embedded web (grant ``NAME=embedded``) and to a loopback address the user granted by its exact URL
  (``NAME=http://127.0.0.1:8000``: plain http that never leaves the machine). ``SERPER_API_KEY`` for
  ``https://google.serper.dev`` is granted by default, since that pairing is the search tool's own.
- **Addresses**: the search and judge endpoints pass the scrape tool's address guard; private,
  loopback, link-local and metadata addresses need the user's ``allow_hosts``. A scrape tool's own
  ``config.allow_hosts`` only asks: each entry must be allowed by the user as well.

Pure: reading ``os.environ`` is the only outside input; nothing here opens a file or a socket.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from matpo_graph.core.addresses import canonical_host, host_problem, http_url_problem, parse_ip

__all__ = [
    "BUILTIN_CODE",
    "BUILTIN_SECRETS",
    "ENV_ALLOW_HOSTS",
    "ENV_ALLOW_SECRETS",
    "ENV_TRUST_CODE",
    "SecretGrant",
    "TrustPolicy",
    "UntrustedCodeError",
    "active_policy_override",
    "active_trust",
    "import_trusted",
    "code_ref_problem",
    "is_code_ref",
    "literal_host_problem",
    "set_active_trust",
    "split_host_entry",
]

ENV_TRUST_CODE = "MATPO_GRAPH_TRUST_CODE"
"""'1'/'all' trusts all code; otherwise a comma-separated list of modules, packages or folders."""
ENV_ALLOW_SECRETS = "MATPO_GRAPH_ALLOW_SECRETS"
"""Comma-separated grants 'ENV_NAME=https://host[:port][/path]' or 'ENV_NAME=embedded'."""
ENV_ALLOW_HOSTS = "MATPO_GRAPH_ALLOW_HOSTS"
"""Comma-separated 'host' or 'host:port' that tools and the judge may reach although not public."""

BUILTIN_CODE: frozenset[str] = frozenset({"matpo_graph.tools.builtin:calculate"})
"""Code references of the project itself that any graph may name."""

BUILTIN_SECRETS: tuple[tuple[str, str], ...] = (("SERPER_API_KEY", "https://google.serper.dev"),)
"""Default (variable, endpoint) grants: the search tool's own pairing."""

_HOW_TO_TRUST = (
    "a graph cannot grant this itself; if you trust this code, run with --trust-module {module} "
    "(or --trust-code for all code), or set {env}={module}"
)


class UntrustedCodeError(ValueError):
    """A graph names code that the user's trust policy does not allow to run."""


def is_code_ref(value: object) -> bool:
    """True for strings of the form 'package.module:function': every part an identifier (so
    'os..path:join', 'os.:system' and 'pkg.1sub:run' are not code references but invalid ones)."""
    if not isinstance(value, str):
        return False
    module, sep, attr = value.partition(":")
    return bool(sep) and attr.isidentifier() and all(p.isidentifier() for p in module.split("."))


def code_ref_problem(value: object, builtins: Iterable[str] = ()) -> str | None:
    """For a field that names code or one of `builtins`: None when it does, else why it is invalid."""
    if isinstance(value, str) and (value in builtins or is_code_ref(value)):
        return None
    names = ", ".join(builtins)
    return (f"{value!r} is not a valid code reference: write 'package.module:function', every part a Python identifier"
            + (f" (or one of {names})" if names else ""))


@dataclass(frozen=True)
class SecretGrant:
    """Environment variable `env` may be sent to `endpoint` ('embedded' or an origin URL, maybe with a path)."""

    env: str
    endpoint: str

    @classmethod
    def parse(cls, text: str) -> "SecretGrant":
        """'NAME=https://host[:port][/path]' or 'NAME=embedded'.

        Raises:
            ValueError: with the expected form.
        """
        name, sep, endpoint = text.strip().partition("=")
        name, endpoint = name.strip(), endpoint.strip()
        if not sep or not name or not endpoint:
            raise ValueError(f"secret grant {text!r} must look like NAME=https://host or NAME=embedded")
        if endpoint != "embedded":
            parts = urlsplit(endpoint)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"secret grant {text!r}: the endpoint must be an http(s) URL or 'embedded'")
        return cls(name, endpoint)

    def covers(self, endpoint: str) -> bool:
        """Whether a request to `endpoint` is one this grant was given for (same scheme, host, port, path prefix)."""
        if self.endpoint == "embedded" or endpoint == "embedded":
            return self.endpoint == endpoint
        mine, theirs = _origin(self.endpoint), _origin(endpoint)
        if mine is None or theirs is None or mine[:3] != theirs[:3]:
            return False
        prefix = mine[3].rstrip("/")
        return not prefix or theirs[3] == prefix or theirs[3].startswith(prefix + "/")


def _origin(url: str) -> tuple[str, str, int, str] | None:
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, parts.hostname.lower().rstrip("."), port or default, parts.path or "/"


@dataclass(frozen=True)
class TrustPolicy:
    """The user's permissions for graphs (see the module docstring). The default trusts built-ins only.

    Attributes:
        trust_all_code: run any code a graph names (like ``trust_remote_code=True``).
        trusted_code: modules or packages ('mypkg' covers 'mypkg.sub:fn'), exact refs
            ('mypkg.mod:fn'), or folders (absolute paths: code installed there is trusted).
        secrets: (variable, endpoint) grants, besides :data:`BUILTIN_SECRETS`.
        allow_hosts: non-public hosts ('host' or 'host:port') tools and the judge may reach.
    """

    trust_all_code: bool = False
    trusted_code: tuple[str, ...] = ()
    secrets: tuple[SecretGrant, ...] = ()
    allow_hosts: tuple[str, ...] = ()
    builtin_secrets: bool = field(default=True, repr=False)

    # -- building -----------------------------------------------------------------------------------
    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "TrustPolicy":
        """The policy the environment variables describe (:data:`ENV_TRUST_CODE` and friends).

        Raises:
            ValueError: a malformed secret grant.
        """
        env = os.environ if environ is None else environ
        code = [p.strip() for p in env.get(ENV_TRUST_CODE, "").split(",") if p.strip()]
        trust_all = any(p.lower() in ("1", "all", "true", "yes") for p in code)
        code = [p for p in code if p.lower() not in ("1", "all", "true", "yes", "0", "false", "no")]
        grants = [SecretGrant.parse(g) for g in env.get(ENV_ALLOW_SECRETS, "").split(",") if g.strip()]
        hosts = [h.strip() for h in env.get(ENV_ALLOW_HOSTS, "").split(",") if h.strip()]
        return cls(trust_all_code=trust_all, trusted_code=tuple(code), secrets=tuple(grants), allow_hosts=tuple(hosts))

    def merged(self, other: "TrustPolicy") -> "TrustPolicy":
        """A policy allowing what either allows."""
        return replace(
            self,
            trust_all_code=self.trust_all_code or other.trust_all_code,
            trusted_code=tuple(dict.fromkeys((*self.trusted_code, *other.trusted_code))),
            secrets=tuple(dict.fromkeys((*self.secrets, *other.secrets))),
            allow_hosts=tuple(dict.fromkeys((*self.allow_hosts, *other.allow_hosts))),
        )

    def to_env(self) -> dict[str, str]:
        """Environment variables that describe this policy (so child processes inherit it)."""
        out: dict[str, str] = {}
        code = (["all"] if self.trust_all_code else []) + list(self.trusted_code)
        if code:
            out[ENV_TRUST_CODE] = ",".join(code)
        if self.secrets:
            out[ENV_ALLOW_SECRETS] = ",".join(f"{g.env}={g.endpoint}" for g in self.secrets)
        if self.allow_hosts:
            out[ENV_ALLOW_HOSTS] = ",".join(self.allow_hosts)
        return out

    # -- code ---------------------------------------------------------------------------------------
    def code_problem(self, ref: str) -> str | None:
        """None when `ref` ('module:function') may run, else why not and how to allow it."""
        if ref in BUILTIN_CODE or self.trust_all_code:
            return None
        module = ref.partition(":")[0]
        for entry in self.trusted_code:
            if _is_folder_entry(entry):
                if _installed_under(module, entry):
                    return None
            elif ref == entry or module == entry or module.startswith(entry + "."):
                return None
        return f"code {ref!r} is not trusted; " + _HOW_TO_TRUST.format(module=module, env=ENV_TRUST_CODE)

    # -- secrets ------------------------------------------------------------------------------------
    def grants(self) -> tuple[SecretGrant, ...]:
        builtin = tuple(SecretGrant(n, e) for n, e in BUILTIN_SECRETS) if self.builtin_secrets else ()
        return (*builtin, *self.secrets)

    def secret_problem(self, env_name: str, endpoint: str) -> str | None:
        """None when the key in `env_name` may be sent to `endpoint` ('embedded' or a URL), else why not."""
        if endpoint != "embedded":
            origin = _origin(endpoint)
            if origin is None:
                return f"the endpoint {endpoint!r} is not an http(s) URL"
            if origin[0] != "https" and not _is_loopback(origin[1]):
                return f"API keys are sent over https only, and {endpoint!r} is {origin[0]}"
        if any(g.env == env_name and g.covers(endpoint) for g in self.grants()):
            return None
        for_ = "embedded" if endpoint == "embedded" else _display_origin(endpoint)
        return (
            f"the graph asks to send environment variable {env_name!r} to {endpoint!r}, which you have not allowed; "
            f"a graph cannot grant this itself; if you mean it, run with --allow-secret {env_name}={for_} "
            f"(or add it to {ENV_ALLOW_SECRETS})"
        )

    # -- addresses ----------------------------------------------------------------------------------
    def host_allowed(self, host: str, port: int | None) -> bool:
        """Whether the user allowed this non-public host (entries 'host' or 'host:port'; an address
        matches in any spelling); port None asks for any port, which only a 'host' entry allows."""
        host = canonical_host(host)
        for entry in self.allow_hosts:
            h, p = split_host_entry(entry)
            if h and h == host and (p is None or (port is not None and p == port)):
                return True
        return False

    def host_entry_problem(self, entry: str) -> str | None:
        """For a graph's own `allow_hosts` entry: None when the user allowed it too, else why not."""
        host, port = split_host_entry(entry)
        if host and self.host_allowed(host, port):
            return None
        shown = entry.strip()
        return (
            f"the graph asks to reach {shown!r} although it may be private, which you have not allowed; a graph cannot "
            f"allow this itself; if you mean it, run with --allow-host {shown} (or add it to {ENV_ALLOW_HOSTS})"
        )


def split_host_entry(entry: str) -> tuple[str, int | None]:
    """'host', 'host:port', '[v6]:port' or a URL -> (canonical host, port or None for any port);
    ("", None), which matches nothing, when the entry cannot be read. A URL without a port stands
    for its scheme's port. Hosts are compared in :func:`~matpo_graph.core.addresses.canonical_host` form."""
    e = entry.strip().lower()
    if "://" in e:
        try:
            parts = urlsplit(e)
            port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
            return canonical_host(parts.hostname or ""), port
        except ValueError:
            return "", None
    if e.startswith("["):
        h, _, rest = e[1:].partition("]")
        p = rest[1:] if rest.startswith(":") else ("" if not rest else "?")
    elif e.count(":") == 1:
        h, _, p = e.partition(":")
    else:
        h, p = e, ""
    if p and not p.isdigit():
        return "", None
    return canonical_host(h), int(p) if p else None


def _is_loopback(host: str) -> bool:
    """A loopback literal: plain http to it never leaves the machine (a local server the user runs)."""
    if host == "localhost":
        return True
    ip = parse_ip(host)
    return ip is not None and ip.is_loopback


def _display_origin(endpoint: str) -> str:
    origin = _origin(endpoint)
    if origin is None:
        return endpoint
    scheme, host, port, _ = origin
    default = 443 if scheme == "https" else 80
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" + ("" if port == default else f":{port}")


def _is_folder_entry(entry: str) -> bool:
    return entry.startswith(("/", "~")) or os.sep in entry or (os.altsep is not None and os.altsep in entry)


def _installed_under(module: str, folder: str) -> bool:
    """Whether the top-level package of `module` is found inside `folder`, without importing it."""
    top = module.split(".")[0]
    try:
        root = Path(folder).expanduser().resolve()
        loaded = sys.modules.get(top)
        if loaded is not None:
            where = getattr(loaded, "__file__", None) or next(iter(getattr(loaded, "__path__", []) or []), None)
        else:
            spec = importlib.util.find_spec(top)
            where = None if spec is None else (spec.origin if spec.has_location else next(iter(spec.submodule_search_locations or []), None))
        if not where:
            return False
        path = Path(where).resolve()
    except (ImportError, ValueError, OSError):
        return False
    return path == root or root in path.parents


_ACTIVE: TrustPolicy | None = None


def set_active_trust(policy: TrustPolicy | None) -> None:
    """Make `policy` what calls without an explicit `trust=` use (None: back to the environment's)."""
    global _ACTIVE
    _ACTIVE = policy


def active_policy_override() -> TrustPolicy | None:
    """The policy set with :func:`set_active_trust`, or None when the environment's applies."""
    return _ACTIVE


def active_trust() -> TrustPolicy:
    """The policy set with :func:`set_active_trust`, else the one the environment describes."""
    return _ACTIVE if _ACTIVE is not None else TrustPolicy.from_env()


def import_trusted(ref: str, *, trust: TrustPolicy | None = None, what: str = "code") -> Callable[..., Any]:
    """Import the callable named 'package.module:function' when the policy trusts it.

    Raises:
        UntrustedCodeError: the policy does not trust it (nothing was imported).
        ImportError / AttributeError / TypeError: the module, the attribute or a callable is missing.
    """
    if not is_code_ref(ref):
        raise ValueError(f"{what} must look like 'package.module:function', got {ref!r}")
    policy = trust if trust is not None else active_trust()
    problem = policy.code_problem(ref)
    if problem:
        raise UntrustedCodeError(f"{what}: {problem}")
    module_name, _, attr = ref.partition(":")
    module = importlib.import_module(module_name)
    fn = getattr(module, attr)
    if not callable(fn):
        raise TypeError(f"{what} {ref!r}: {attr!r} is a {type(fn).__name__}, not a function")
    return fn


def literal_host_problem(url: str, policy: TrustPolicy) -> str | None:
    """A static check for validation, with the runtime guard's classification
    (:func:`~matpo_graph.core.addresses.host_problem`): an endpoint whose host is a non-public address
    in any spelling, 'localhost' or a metadata name is refused unless the user allowed it (other
    names are resolved at call time)."""
    problem = http_url_problem(url)
    if problem:
        return problem
    parts = urlsplit(url.strip())
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    host = parts.hostname or ""
    if policy.host_allowed(host, port):
        return None
    return host_problem(host)


def grants_from(texts: Iterable[str]) -> tuple[SecretGrant, ...]:
    """Parse several 'NAME=endpoint' grants (see :meth:`SecretGrant.parse`)."""
    return tuple(SecretGrant.parse(t) for t in texts)
