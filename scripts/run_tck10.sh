#!/usr/bin/env bash
# Run the conformance kit's 1.0-dev branch (a2aproject/a2a-tck) against scoped-a2a, and against
# the official a2a-sdk server with the same scenarios, in one go; print the table.
#
#   scripts/run_tck10.sh OUTDIR [KIT_DIR]
#
# KIT_DIR: a work tree of the kit's 1.0-dev branch with its venv in .venv (default /work/tck10;
# `python -m venv .venv && .venv/bin/pip install -e .`, as its README says with uv).
# For each backend (trio, asyncio) one scoped-a2a server (scoped_a2a.agents.tck:tck_agent), and
# one a2a-sdk server (scripts/tck10_sdk_server.py); against each, the kit once per transport
# the card declares (JSON-RPC, HTTP+JSON, and gRPC: scoped-a2a serves it with --grpc; the
# a2a-sdk server here serves no gRPC) and per level (must, should). A TRANSPORTS item may name
# several, comma-separated ("grpc,jsonrpc,http_json"): one kit run over all of them.
# Each run's JUnit XML is kept as OUTDIR/NAME.xml, its output as OUTDIR/NAME.log; the table is
# read from the XML (scripts/tck10_table.py), not from the kit's own summary.
# Environment: PYTHON (interpreter with scoped-a2a and a2a-sdk; default .venv-311/bin/python),
# BACKENDS, TRANSPORTS, LEVELS (space-separated subsets), SDK=0 to skip the a2a-sdk server,
# SERVE_ARGS (extra `serve` options), PORT (first port, default 8871). UNIQUE_IDS=1: a
# diagnostic variant that gives every message the kit sends its own messageId
# (scripts/tck10_unique_ids; the kit reuses them, docs/conformance.md); files end -unique-ids.
#
# The test environment, not the server: the served process resolves example.com through a stub
# (scripts/tck10_resolver, no DNS here); the card is 1.0-only (--card-1-0-only: the kit's card
# schema refuses the 0.3 fields); the kit's own webhook on localhost is allowed. PLAIN=1 drops
# all three: `serve --agent ... --grpc` as a user starts it (files end -plain).
# docs/conformance.md says why for each.
set -u
OUT=$1; KIT=${2:-/work/tck10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv-311/bin/python}
BACKENDS=${BACKENDS:-trio asyncio}; TRANSPORTS=${TRANSPORTS:-jsonrpc http_json grpc}
LEVELS=${LEVELS:-must should}; PORT=${PORT:-8871}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SUFFIX=""; KIT_PATH="${PYTHONPATH:-}"; KIT_ARGS=""
ENV_ARGS="--card-1-0-only --allow-webhook-host localhost"
SERVE_PATH="$ROOT/scripts/tck10_resolver:$ROOT/src"
if [ "${PLAIN:-0}" = 1 ]; then  # serve as a user starts it: no setting for the kit
    SUFFIX="-plain"; ENV_ARGS=""; SERVE_PATH="$ROOT/src"
fi
if [ "${UNIQUE_IDS:-0}" = 1 ]; then  # the diagnostic variant: one messageId per message
    SUFFIX="$SUFFIX-unique-ids"; KIT_ARGS="-p tck_unique_ids"
    KIT_PATH="$ROOT/scripts/tck10_unique_ids${PYTHONPATH:+:$PYTHONPATH}"
fi

wait_card() {
    for _ in $(seq 150); do
        curl -sf "http://127.0.0.1:$1/.well-known/agent-card.json" >/dev/null && return 0
        sleep 0.2
    done
    echo "server on port $1 did not start" >&2; return 1
}

run_kit() {  # NAME PORT
    for transport in $TRANSPORTS; do
        for level in $LEVELS; do
            name="$1-$transport-$level$SUFFIX"
            (cd "$KIT" && PYTHONPATH="$KIT_PATH" ./.venv/bin/python run_tck.py \
                --sut-host "http://127.0.0.1:$2" --transport "$transport" --level "$level" \
                -- $KIT_ARGS >"$OUT/$name.log" 2>&1)
            echo "$name: exit $?"
            cp "$KIT/reports/junitreport.xml" "$OUT/$name.xml"
        done
    done
}

stop() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

for backend in $BACKENDS; do
    PYTHONPATH="$SERVE_PATH${PYTHONPATH:+:$PYTHONPATH}" \
        "$PYTHON" -m scoped_a2a serve --backend "$backend" --host 127.0.0.1 --port "$PORT" \
        --agent scoped_a2a.agents.tck:tck_agent $ENV_ARGS --grpc ${SERVE_ARGS:-} \
        >"$OUT/scoped-$backend$SUFFIX.server.log" 2>&1 &
    SERVER=$!
    wait_card "$PORT" && run_kit "scoped-$backend" "$PORT"
    stop $SERVER
    PORT=$((PORT + 1))
done

if [ "${SDK:-1}" != 0 ]; then
    "$PYTHON" "$ROOT/scripts/tck10_sdk_server.py" --port "$PORT" \
        >"$OUT/a2a-sdk$SUFFIX.server.log" 2>&1 &
    SERVER=$!
    # Its card lists no gRPC interface: the kit would find no transport to test there.
    TRANSPORTS=$(for t in $TRANSPORTS; do case $t in *grpc*) ;; *) printf '%s ' "$t";; esac; done)
    wait_card "$PORT" && run_kit "a2a-sdk" "$PORT"
    stop $SERVER
fi

"$PYTHON" "$ROOT/scripts/tck10_table.py" "$OUT"/*.xml
