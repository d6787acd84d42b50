"""Options given where they do nothing: refused in one line (exit status 2) before anything
starts, instead of being silently ignored.

Many of ``serve``'s and ``worker``'s options apply in one configuration only: ``--retain``
with an SQLite or PostgreSQL store, ``--redis-prefix`` with Redis, ``--console-operator``
with ``--console``, ``--card-signing-kid`` with ``--card-signing-key``. Given in another,
they used to be accepted and ignored, so a user believed in a retention, a key prefix or an
operator that was not there. An option counts as given when its value differs from its
default (:func:`given_options`, computed once from the parser by :mod:`.main`): an option
set to its own default changes nothing, so nothing is lost by letting it pass.

The table of which store uses which option lives here, not in the store modules: it is the
one place that says it, and :func:`refuse_ignored_options` the one place that checks it.
"""

from __future__ import annotations

import argparse

STORE_OPTIONS: dict[str, tuple[frozenset[str], str]] = {
    "retain": (frozenset({"store_sqlite", "store_postgres"}), "an SQLite or PostgreSQL store"),
    "max_ended_bytes": (frozenset({"store_memory", "store_sqlite", "store_postgres"}),
                        "the memory, SQLite or PostgreSQL store (Redis counts tasks only)"),
    "no_worker": (frozenset({"store_redis", "store_postgres"}), "a Redis or PostgreSQL store"),
    "store_wait": (frozenset({"store_redis", "store_postgres"}), "a Redis or PostgreSQL store"),
    "lease": (frozenset({"store_redis", "store_postgres"}), "a Redis or PostgreSQL store"),
    "concurrency": (frozenset({"store_sqlite", "store_redis", "store_postgres"}),
                    "a store with a durable queue: SQLite, Redis or PostgreSQL"),
    "claim_idle": (frozenset({"store_sqlite", "store_redis", "store_postgres"}),
                   "a store with a durable queue: SQLite, Redis or PostgreSQL"),
    "redis_prefix": (frozenset({"store_redis"}), "a Redis store"),
    "postgres_schema": (frozenset({"store_postgres"}), "a PostgreSQL store"),
    "postgres_pool": (frozenset({"store_postgres"}), "a PostgreSQL store"),
    "postgres_sync_events": (frozenset({"store_postgres"}), "a PostgreSQL store"),
    "postgres_key_file": (frozenset({"store_postgres"}), "a PostgreSQL store"),
}
"""A store option's dest -> (the store modules, :data:`.stores.SCHEMES`' values, that read
it; the words for them)."""

STORE_WORDS = {"store_memory": "the memory store (the default --store)",
               "store_sqlite": "an SQLite store", "store_redis": "a Redis store",
               "store_postgres": "a PostgreSQL store"}
"""How a line names the store given (never its URL, which may hold a password)."""

NEEDS: dict[str, tuple[str, str]] = {
    "card_signing_kid": ("card_signing_key", "--card-signing-key"),
    "console_operator": ("console", "--console"),
    "console_operator_scope": ("console", "--console"),
    "grpc_max_fields": ("grpc", "--grpc"),
    **{name: ("jwt_jwks", "--jwt-jwks") for name in (
        "jwt_issuer", "jwt_audience", "jwt_algorithms", "jwt_leeway", "jwt_required_scope",
        "jwt_tenants_claim")},
}
"""An option's dest -> (the dest of the option it needs, that option's flag)."""

UNDONE_BY: dict[str, tuple[str, str]] = {
    name: ("no_push", "--no-push") for name in (
        "allow_webhook_host", "push_bearer_token", "push_signing_secret")
}
"""An option's dest -> (the dest of an option that makes it do nothing, that option's flag)."""


def given_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """The options of ``args.command`` whose value differs from their default: dest -> the
    option's first long flag. Defaults read from the environment count as defaults."""
    command = None
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            command = action.choices.get(getattr(args, "command", None) or "")
    if command is None:
        return {}
    given: dict[str, str] = {}
    for action in command._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        if getattr(args, action.dest, action.default) != action.default:
            given[action.dest] = max(action.option_strings, key=len)
    return given


def refuse_ignored_options(args: argparse.Namespace, store_module: str) -> None:
    """SystemExit with one line for the first given option that would do nothing with the
    rest of the command line; ``store_module`` is the module serving ``--store`` (its name
    in :data:`.stores.SCHEMES`)."""
    given: dict[str, str] = getattr(args, "given", {})
    for dest, flag in given.items():
        if dest in STORE_OPTIONS:
            users, words = STORE_OPTIONS[dest]
            if store_module not in users:
                raise SystemExit(f"{flag} does nothing with {STORE_WORDS[store_module]}: it "
                                 f"is for {words}")
        if dest in NEEDS:
            needed, needed_flag = NEEDS[dest]
            if not getattr(args, needed, None):
                raise SystemExit(f"{flag} needs {needed_flag}")
        if dest in UNDONE_BY:
            undone, undone_flag = UNDONE_BY[dest]
            if getattr(args, undone, False):
                raise SystemExit(f"{flag} does nothing with {undone_flag}")


__all__ = ["given_options", "refuse_ignored_options"]
