#!/usr/bin/env bash
# One command from a fresh clone: set up, start the embedded stack, run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
eval "$(.venv/bin/eosbatch stack up)"
exec .venv/bin/python -m pytest "$@"
