#!/usr/bin/env bash
# One command from a fresh clone: set up, start the embedded stack, run the demo pipelines end to end.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
eval "$(.venv/bin/eosbatch stack up)"
export EOSBATCH_PIPELINES=examples.orders.pipeline,examples.customers.pipeline
.venv/bin/eosbatch db upgrade
exec .venv/bin/python -m examples.orders.demo "$@"
