#!/usr/bin/env bash
# Installs what eosbatch needs on a fresh Debian machine: a JDK, Maven, and Chromium with its WebDriver for
# the tests of the Airflow UI (apt, when missing), and the Python packages into .venv. PostgreSQL (apt) and
# the Kafka/Spark jars (Maven) come with `eosbatch stack up`.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]} with apt-get"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
python=$(command -v python3.11 || command -v python3)
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# The airflow, schema-registry and bench extras are always installed: the DAG tests, `eosbatch airflow up`, the
# schema registry's tests and the bench's figures (and their unit test) need them. pyproject.toml takes
# version ranges; the development venv gets the versions the suite was tested with (README), so that a new
# machine does not move to a release nobody ran the tests on.
tested=("pyspark==4.2.0" "apache-airflow==3.3.2" "confluent-kafka==2.16.1")
.venv/bin/python -m pip install -q -e ".[dev,airflow,schema-registry,bench${EOSBATCH_EXTRAS:+,$EOSBATCH_EXTRAS}]" "${tested[@]}"
echo "setup: ready ($(.venv/bin/python --version), $(java -version 2>&1 | head -1))"
