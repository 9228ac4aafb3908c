"""The trust options every verb shares, and the user's trust file; see :mod:`matpo_graph.core.trust`.

Permission for a graph's code, secrets and non-public endpoints comes from three places, merged (each
can only add): the command line of any verb that takes a graph, the environment
(``MATPO_GRAPH_TRUST_CODE``, ``MATPO_GRAPH_ALLOW_SECRETS``, ``MATPO_GRAPH_ALLOW_HOSTS``) and the
user's own file ``$MATPO_GRAPH_TRUST_FILE`` or ``~/.config/matpo-graph/trust.yaml``::

    trust_code: false               # true: run any code a graph names
    trusted_code: [my_tools, /home/me/graph-code]
    secrets: {OPENAI_API_KEY: https://api.openai.com}
    allow_hosts: ["127.0.0.1:8000"]

The merged policy becomes the process's active policy and is exported to the environment, so the
processes a verb starts (veRL workers, say) apply the same one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from matpo_graph.core.trust import SecretGrant, TrustPolicy, active_policy_override, set_active_trust

__all__ = ["TRUST_FILE_ENV", "add_trust_options", "apply_trust_options", "policy_from_args", "user_trust_file"]

TRUST_FILE_ENV = "MATPO_GRAPH_TRUST_FILE"
_DEST = "trust_"


def user_trust_file() -> Path:
    """Where the user's trust file is looked for."""
    if os.environ.get(TRUST_FILE_ENV):
        return Path(os.environ[TRUST_FILE_ENV]).expanduser()
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "matpo-graph" / "trust.yaml"


def _policy_from_file(path: Path) -> TrustPolicy:
    import yaml  # noqa: PLC0415

    if not path.is_file():
        return TrustPolicy()
    data: Any = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the trust file must be a mapping (trust_code, trusted_code, secrets, allow_hosts)")
    unknown = sorted(set(data) - {"trust_code", "trusted_code", "secrets", "allow_hosts"})
    if unknown:
        raise ValueError(f"{path}: unknown keys {', '.join(unknown)}")
    secrets = data.get("secrets") or {}
    if not isinstance(secrets, dict):
        raise ValueError(f"{path}: secrets must map a variable name to its endpoint")
    return TrustPolicy(
        trust_all_code=bool(data.get("trust_code", False)),
        trusted_code=tuple(str(x) for x in data.get("trusted_code") or ()),
        secrets=tuple(SecretGrant.parse(f"{k}={v}") for k, v in secrets.items()),
        allow_hosts=tuple(str(x) for x in data.get("allow_hosts") or ()),
    )


def _leaf_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001
    if not subs:
        return [parser]
    return [leaf for action in subs for child in dict.fromkeys(action.choices.values()) for leaf in _leaf_parsers(child)]


def add_trust_options(parser: argparse.ArgumentParser) -> None:
    """Add the shared trust options to every verb of `parser` (called once the verbs are registered)."""
    for leaf in _leaf_parsers(parser):
        if any(a.dest == _DEST + "code" for a in leaf._actions):  # noqa: SLF001
            continue
        group = leaf.add_argument_group("trust (what a graph may make this machine do; the graph cannot grant it)")
        group.add_argument("--trust-code", dest=_DEST + "code", action="store_true",
                           help="run any code the graph names (python tools, credit strategies, scorers)")
        group.add_argument("--trust-module", dest=_DEST + "modules", action="append", default=[], metavar="MODULE|FOLDER",
                           help="trust code from this module or package (or installed in this folder); repeatable")
        group.add_argument("--allow-secret", dest=_DEST + "secrets", action="append", default=[], metavar="ENV=URL",
                           help="let the graph send environment variable ENV as an API key to URL (https) or 'embedded'; repeatable")
        group.add_argument("--allow-host", dest=_DEST + "hosts", action="append", default=[], metavar="HOST[:PORT]",
                           help="let tools and the judge reach this private/loopback host; repeatable")


def policy_from_args(args: argparse.Namespace) -> TrustPolicy:
    """The policy of the command line, the environment and the user's trust file, merged.

    Raises:
        ValueError: a malformed grant or trust file.
    """
    cli = TrustPolicy(
        trust_all_code=bool(getattr(args, _DEST + "code", False)),
        trusted_code=tuple(getattr(args, _DEST + "modules", []) or ()),
        secrets=tuple(SecretGrant.parse(g) for g in getattr(args, _DEST + "secrets", []) or ()),
        allow_hosts=tuple(getattr(args, _DEST + "hosts", []) or ()),
    )
    return cli.merged(TrustPolicy.from_env()).merged(_policy_from_file(user_trust_file()))


@contextlib.contextmanager
def apply_trust_options(args: argparse.Namespace) -> Iterator[TrustPolicy]:
    """While the verb runs: the merged policy is the active one and is exported for child processes.

    Both are undone afterwards, so a verb run in-process (tests, notebooks) leaves no trust behind.

    Raises:
        ValueError: a malformed grant or trust file (before anything is changed).
    """
    policy = policy_from_args(args)
    exported = policy.to_env()
    saved_env = {k: os.environ.get(k) for k in exported}
    saved_policy = active_policy_override()
    set_active_trust(policy)
    os.environ.update(exported)
    try:
        yield policy
    finally:
        set_active_trust(saved_policy)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
