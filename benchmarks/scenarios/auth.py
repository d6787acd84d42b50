"""Scenario 8: what authentication costs: blocking ``SendMessage`` with and without a JWT.

The same scoped-a2a server twice per worker: open, and with ``--jwt-jwks`` (RS256, issuer and
audience checked, keys from a file). Every request to the second carries a valid bearer token,
so each one pays the header parse, the RSA signature check and the claim checks, plus the owner
bookkeeping. Closed-loop callers on keep-alive connections, as in scenario 1. The target is a
JWT row within 15 % of the open row.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import time
from pathlib import Path

from ..core import Bench, Metric, Scenario, percentile
from ..loadgen import Loop, RequestTemplate, connect, connect_many
from ..systems import ServerProcess, System
from .send import _drive, check

CONCURRENCY = (1, 64)
ISSUER, AUDIENCE = "https://issuer.bench", "scoped-a2a-bench"


def _credentials() -> tuple[Path, str]:
    """A fresh RSA key: its JWKS file (for the server) and a token valid for an hour."""
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid="bench", alg="RS256", use="sig")
    folder = Path(tempfile.mkdtemp(prefix="scoped-a2a-bench-auth-"))
    atexit.register(shutil.rmtree, folder, True)
    path = folder / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk]}))
    now = int(time.time())
    token = jwt.encode({"sub": "bench", "iss": ISSUER, "aud": AUDIENCE, "iat": now,
                        "exp": now + 3600}, key, algorithm="RS256", headers={"kid": "bench"})
    return path, token


class Auth(Scenario):
    name = "auth"
    number = 10
    title = "the cost of authentication (blocking SendMessage, echo agent, with and without JWT)"
    metrics = (
        *(
            m
            for c in CONCURRENCY
            for m in (
                Metric(f"rps_c{c}", f"req/s c={c}", "req/s", "higher", True, "{:.0f}"),
                Metric(f"p50_c{c}", f"p50 ms c={c}", "ms", "lower", c == 64, "{:.2f}"),
            )
        ),
        Metric("jwt_cost_c64", "JWT cost c=64", "%", "lower", False, "{:.1f}"),
    )
    notes = "JWT cost: how much lower the JWT row's c=64 req/s is than the open row's."

    def __init__(self) -> None:
        self._creds: tuple[Path, str] | None = None

    def _systems(self) -> list[tuple[System, str | None]]:
        if self._creds is None:
            self._creds = _credentials()
        jwks, token = self._creds
        jwt_opts = ("--jwt-jwks", str(jwks), "--jwt-issuer", ISSUER, "--jwt-audience", AUDIENCE)
        found: list[tuple[System, str | None]] = []
        for server in ("hypercorn-trio", "hypercorn-asyncio"):
            found.append((System("scoped", server), None))
            found.append((System("scoped", server, jwt_opts), token))
        return found

    def systems(self) -> list[System]:
        return [s for s, _ in self._systems()]

    async def run(self, bench: Bench) -> None:
        tokens = dict(self._systems())
        async with bench.servers(list(tokens)) as running:
            open_rps: dict[str, float] = {}
            for system, proc in running.items():
                rps = await self.measure(bench, system, proc, tokens[system])
                if tokens[system] is None:
                    open_rps[system.server] = rps
                elif rps and open_rps.get(system.server):
                    cost = (1 - rps / open_rps[system.server]) * 100
                    bench.record("scoped-a2a + JWT", system.server, "jwt_cost_c64", cost, "%",
                                 role="subject")
                    bench.progress(f"JWT cost on {system.server}: {cost:.1f} %")

    async def measure(self, bench: Bench, system: System, proc: ServerProcess,
                      token: str | None) -> float:
        name = "scoped-a2a + JWT" if token else "scoped-a2a"
        headers = [f"Authorization: Bearer {token}"] if token else []
        template = RequestTemplate(proc.port, "SendMessage", "echo hello", headers=headers)
        async with await connect(proc.port) as probe:
            status, body = await probe.request(template.make(0))
        if not check(status, body):
            bench.fail(f"{name} / {system.server} answered {status}: {body[:300]!r}")
            return 0.0
        rps = 0.0
        for level, c in enumerate(CONCURRENCY):
            conns = await connect_many(proc.port, c)
            # Ids of their own at each level: a repeated messageId is a resend of the first
            # send (docs/exactly-once.md), answered with its task instead of a new run.
            loops = [Loop(conn, template, check, seq_base=(level * 100 + i + 1) * 10**7,
                          port=proc.port)
                     for i, conn in enumerate(conns)]
            try:
                await _drive(loops, bench.sizes.warmup, record=False)
                for lp in loops:
                    lp.latencies.clear()
                window = await _drive(loops, bench.sizes.duration, record=True)
            finally:
                for lp in loops:
                    lp.conn.close()
            latencies = [x for lp in loops for x in lp.latencies]
            if not latencies or any(lp.errors for lp in loops):
                bench.fail(f"{name} / {system.server} c={c}: wrong or no answers")
                continue
            rps = len(latencies) / window
            p50 = percentile(latencies, 50) * 1e3
            bench.record(name, system.server, f"rps_c{c}", rps, "req/s", role="subject")
            bench.record(name, system.server, f"p50_c{c}", p50, "ms", role="subject")
            bench.progress(f"{name + ' / ' + system.server:36} c={c:<3} {rps:7.0f} req/s  "
                           f"p50 {p50:6.2f} ms")
        return rps
