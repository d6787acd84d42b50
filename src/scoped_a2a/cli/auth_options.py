"""``serve``'s authentication options (API keys, JWT bearer tokens), and what the options of
authentication, TLS, card signing and per-caller limits build before the event loop starts.

With any credential configured, every route but the agent card needs one, and each task belongs
to its creator; SIGHUP re-reads the key files (:func:`.signals.reload_on_sighup`). A bad option
or file is one line and exit status 2 (SystemExit), before anything listens.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..runtime.limits import CallerLimits
from ..server.auth import Authenticator, Scheme
from ..server.card_signing import CardSigner


def add_auth_options(s: argparse.ArgumentParser) -> None:
    g = s.add_argument_group(
        "authentication",
        "Without these every caller is anonymous; with them each task belongs to its creator "
        "(docs/security.md).")
    g.add_argument("--api-keys", metavar="FILE",
                   default=os.environ.get("SCOPED_A2A_API_KEYS"),
                   help="accept the API keys of FILE (one 'id:sha256:HEX' or 'id:TOKEN' a "
                        "line), sent as 'X-API-Key: TOKEN' or 'Authorization: Bearer TOKEN'; "
                        "SIGHUP re-reads it (default: $SCOPED_A2A_API_KEYS)")
    g.add_argument("--jwt-jwks", metavar="FILE_OR_URL",
                   help="accept JWT bearer tokens signed by a key of this JWKS (a file, or an "
                        "http(s) URL fetched when a token names an unknown key)")
    g.add_argument("--jwt-issuer", help="the iss a JWT must carry")
    g.add_argument("--jwt-audience", help="the aud a JWT must carry")
    g.add_argument("--jwt-algorithms", default="RS256,PS256,ES256,EdDSA", metavar="ALGS",
                   help="the signature algorithms accepted, comma-separated (asymmetric only)")
    g.add_argument("--jwt-leeway", type=float, default=30.0, metavar="SECONDS",
                   help="clock skew allowed on exp/nbf/iat")
    g.add_argument("--jwt-required-scope", action="append", default=[], metavar="SCOPE",
                   help="a scope a JWT must grant, else 403 (repeatable)")
    g.add_argument("--jwt-tenants-claim", metavar="CLAIM",
                   help="limit each caller to the tenants this JWT claim lists (the 1.0 "
                        "request field tenant; other tenants are refused with -32043)")


def authenticator_from_args(args: argparse.Namespace) -> Authenticator | None:
    """The configured schemes, or None. Raises SystemExit with one line on a bad option or
    file (key files, JWKS file, TLS files)."""
    schemes: list[Scheme] = []
    try:
        if args.ca_certs:
            if not (args.certfile and args.keyfile):
                raise ValueError("--ca-certs needs --certfile and --keyfile")
            from ..server.tls import ClientCertificate

            schemes.append(ClientCertificate())
        if bool(args.certfile) != bool(args.keyfile):
            raise ValueError("TLS needs both --certfile and --keyfile")
        if args.api_keys:
            from ..server.auth.api_keys import ApiKeys

            schemes.append(ApiKeys(args.api_keys))
        if args.jwt_jwks:
            from ..server.auth.bearer_jwt import JwksKeys, JwtBearer

            algorithms = [a.strip() for a in args.jwt_algorithms.split(",") if a.strip()]
            schemes.append(JwtBearer(
                JwksKeys(args.jwt_jwks), issuer=args.jwt_issuer, audience=args.jwt_audience,
                algorithms=algorithms, leeway=args.jwt_leeway,
                required_scopes=args.jwt_required_scope,
                tenants_claim=args.jwt_tenants_claim))
        # (the --jwt-* options without --jwt-jwks: refused by option_scope.py, with the rest)
        if args.certfile:  # load the TLS files now: a bad one is one line, before listening
            from hypercorn.config import Config

            from ..server.tls import configure_tls

            configure_tls(Config(), certfile=args.certfile, keyfile=args.keyfile,
                          ca_certs=args.ca_certs)
    except ValueError as exc:  # a bad option or file: one line, exit status 2
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(2) from None
    return Authenticator(schemes) if schemes else None


def limits_from_args(args: argparse.Namespace) -> CallerLimits | None:
    if args.max_runs_per_caller is None and args.max_parked_per_caller is None:
        return None
    return CallerLimits(args.max_runs_per_caller, args.max_parked_per_caller)


def tls_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """``serve``'s TLS keyword arguments."""
    return {"certfile": args.certfile, "keyfile": args.keyfile, "ca_certs": args.ca_certs}


def card_signer_from_args(args: argparse.Namespace) -> CardSigner | None:
    """The card signer of ``--card-signing-key``, or None; SystemExit (one line) if unusable."""
    if not args.card_signing_key:
        return None
    try:
        return CardSigner(args.card_signing_key, kid=args.card_signing_kid)
    except ValueError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(2) from None
