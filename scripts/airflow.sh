#!/usr/bin/env bash
# One command from a fresh clone: set up, start the embedded stack and a real local Airflow (API server,
# scheduler, DAG processor, triggerer; LocalExecutor; metadata in the stack's PostgreSQL) serving the DAGs of
# EOSBATCH_PIPELINES (the demo pipelines by default).
#   ./scripts/airflow.sh          up; prints how to reach it
#   ./scripts/airflow.sh demo     up, then demo input into `orders` and one run of eosbatch__order_totals
#   ./scripts/airflow.sh down     stop Airflow (the stack keeps running: `.venv/bin/eosbatch stack down`)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = down ]; then exec .venv/bin/eosbatch airflow down; fi
./scripts/setup.sh
export EOSBATCH_PIPELINES=${EOSBATCH_PIPELINES:-examples.orders.pipeline}
eval "$(.venv/bin/eosbatch stack up)"
.venv/bin/eosbatch db upgrade
home=$(.venv/bin/python -c 'from eosbatch import stack; print(stack.home())')
.venv/bin/eosbatch airflow up > "$home/airflow.env"
# shellcheck disable=SC1091
source "$home/airflow.env"
if [ "${1:-}" = demo ]; then
  .venv/bin/python -m examples.orders.generate --records 20000
  .venv/bin/airflow dags unpause eosbatch__order_totals >/dev/null
  run="demo__$(date -u +%Y%m%dT%H%M%S)"
  .venv/bin/airflow dags trigger eosbatch__order_totals --run-id "$run" >/dev/null
  echo "triggered eosbatch__order_totals run $run; waiting for it"
  for _ in $(seq 1 300); do
    state=$(.venv/bin/airflow dags list-runs eosbatch__order_totals -o plain 2>/dev/null | awk -v r="$run" '$2 == r {print $3}')
    case "$state" in success|failed) break ;; esac
    sleep 2
  done
  echo "run $run: ${state:-unknown}"
  .venv/bin/eosbatch status order_totals
fi
cat <<EOM
Airflow is up: $(.venv/bin/eosbatch airflow status | awk '/^url:/ {print $2}')  (no login: every user is admin)
  source $home/airflow.env                    # AIRFLOW_HOME and the eosbatch settings, for the CLIs
  .venv/bin/airflow dags unpause eosbatch__order_totals
  .venv/bin/airflow dags trigger eosbatch__order_totals
  .venv/bin/airflow dags trigger eosbatch__order_totals_live__backfill --conf '{"ranges": ["orders:0:0-1000"]}'
  ./scripts/airflow.sh down
EOM
