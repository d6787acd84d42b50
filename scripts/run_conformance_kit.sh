#!/usr/bin/env bash
# Run the A2A conformance kit (a2aproject/a2a-tck) against a scoped-a2a server started here.
#
#   scripts/run_conformance_kit.sh BACKEND TRANSPORT AGENT PORT OUTDIR [KIT_DIR] [VERSION]
#
# BACKEND: trio|asyncio; TRANSPORT: jsonrpc|rest; AGENT: MODULE:ATTR (e.g.
# scoped_a2a.agents.demo:demo_agent or scoped_a2a.agents.conformance:conformance_agent);
# KIT_DIR: a clone of the kit with a .venv (default /work/tck); VERSION: 1.0 (default: the kit
# sends A2A-Version: 1.0) or 0.3 (no header: the 0.3 dialect). Environment: PYTHON (the
# interpreter with scoped-a2a's dependencies), SERVE_ARGS (extra `serve` options).
set -u
BACKEND=$1; TRANSPORT=$2; AGENT=$3; PORT=$4; OUT=$5; KIT=${6:-/work/tck}; VERSION=${7:-1.0}
PYTHON=${PYTHON:-python}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NAME="$BACKEND-$TRANSPORT-$(echo "$AGENT" | sed 's/.*://')-$VERSION"
mkdir -p "$OUT"
PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m scoped_a2a serve \
    --backend "$BACKEND" --host 127.0.0.1 --port "$PORT" --agent "$AGENT" ${SERVE_ARGS:-} \
    >"$OUT/$NAME.server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$PORT/.well-known/agent-card.json" >/dev/null && break
    sleep 0.2
done
if [ "$VERSION" = "1.0" ]; then export A2A_AUTH_HEADERS='{"A2A-Version":"1.0"}'; fi
cd "$KIT" && ./.venv/bin/python run_tck.py --sut-url "http://127.0.0.1:$PORT" --category all \
    --transports "$TRANSPORT" --compliance-report "$OUT/$NAME.json" >"$OUT/$NAME.log" 2>&1
echo "$NAME: exit $?"
