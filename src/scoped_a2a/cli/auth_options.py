"""``serve``'s authentication options (API keys, JWT bearer tokens, reloading on SIGHUP) and
its per-caller limits."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import Any

import anyio
from anyio.abc import TaskStatus

from ..runtime.limits import CallerLimits
from ..server.auth import Authenticator, Scheme
from ..server.card_signing import CardSigner
from .arg_types import at_least_one

log = logging.getLogger("scoped_a2a.cli")


def add_auth_options(s: argparse.ArgumentParser) -> None:
    g = s.add_argument_group(
        "authentication",
        "Without these, every caller is anonymous and sees every task. With them, every route "
        "but the agent card needs a credential, and each task belongs to its creator. "
        "SIGHUP re-reads the key files (see docs/security.md).")
    g.add_argument("--api-keys", metavar="FILE",
                   default=os.environ.get("SCOPED_A2A_API_KEYS"),
                   help="accept the API keys of FILE (one 'id:sha256:HEX' or 'id:TOKEN' a "
                        "line), sent as 'X-API-Key: TOKEN' or 'Authorization: Bearer TOKEN' "
                        "(default: $SCOPED_A2A_API_KEYS)")
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
    g.add_argument("--card-signing-key", metavar="PEM",
                   help="sign the agent card with this private key (RSA, EC or Ed25519); "
                        "its public JWKS is served at /.well-known/agent-card-jwks.json")
    g.add_argument("--card-signing-kid", metavar="KID",
                   help="the key id in the card's signature (default: the key's thumbprint)")
    t = s.add_argument_group("TLS")
    t.add_argument("--certfile", metavar="PEM", help="serve HTTPS with this certificate chain")
    t.add_argument("--keyfile", metavar="PEM", help="the private key of --certfile")
    t.add_argument("--ca-certs", metavar="PEM",
                   help="accept client certificates issued by this CA (mutual TLS): the "
                        "certificate's subject commonName is the caller's principal id; "
                        "clients without one need another credential")


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
        elif (args.jwt_issuer or args.jwt_audience or args.jwt_required_scope
              or args.jwt_tenants_claim):
            raise ValueError("the --jwt-* options need --jwt-jwks")
        if args.certfile:  # load the TLS files now: a bad one is one line, before listening
            from hypercorn.config import Config

            from ..server.tls import configure_tls

            configure_tls(Config(), certfile=args.certfile, keyfile=args.keyfile,
                          ca_certs=args.ca_certs)
    except ValueError as exc:  # a bad option or file: one line, exit status 2
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(2) from None
    return Authenticator(schemes) if schemes else None


async def reload_on_sighup(
    auth: Authenticator, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Re-read every scheme's keys on each SIGHUP, until cancelled; reports started once the
    handler is installed (before it, SIGHUP's default action ends the process)."""
    with anyio.open_signal_receiver(signal.SIGHUP) as signals:
        task_status.started()
        async for _ in signals:
            log.info("SIGHUP: reloading credentials")
            auth.reload()


def add_limit_options(s: argparse.ArgumentParser) -> None:
    g = s.add_argument_group(
        "per-caller limits",
        "Per principal (without authentication, all callers are one). A new task beyond a "
        "limit is refused with error -32029 naming it.")
    g.add_argument("--max-runs-per-caller", type=at_least_one, metavar="N",
                   help="runs one caller may have working at once")
    g.add_argument("--max-parked-per-caller", type=at_least_one, metavar="M",
                   help="tasks of one caller that may wait for its input at once")


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
