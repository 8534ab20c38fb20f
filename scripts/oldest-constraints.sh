#!/usr/bin/env bash
# Writes constraints/oldest.txt: the oldest versions pyproject.toml allows of PySpark, Airflow, the providers
# of the `airflow` extra and confluent-kafka (each at its lower bound), with every other package as pip resolves
# it next to them. CI installs the wheel with these (tests/deploy/); Airflow's own constraint files cannot be
# fetched here. Run it again after changing a lower bound:  ./scripts/oldest-constraints.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
report=$(mktemp)
trap 'rm -f "$report"' EXIT
# The floors, read from pyproject.toml; the postgres provider's is the one apache-airflow[postgres] sets.
mapfile -t floors < <("$python" - <<'PY'
import re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
wanted = ("pyspark", "apache-airflow", "apache-airflow-providers-apache-kafka",
          "apache-airflow-providers-apache-spark", "apache-airflow-providers-openlineage", "confluent-kafka")
for requirement in project["dependencies"] + project["optional-dependencies"]["airflow"]:
    match = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*>=\s*([0-9][0-9.]*)", requirement)
    if match and match[1] in wanted:
        print(f"{match[1]}{match[2] or ''}=={match[3]}")
PY
)
floors+=("apache-airflow-providers-postgres==5.13.1")  # what apache-airflow 3.2.0's [postgres] extra allows
# Held back: newer releases than the oldest Airflow works with (its own constraint files would pin them). With
# fastapi 0.137+ (and the cadwyn that needs it) Airflow 3.2.0's in-process execution API fails to build its
# models (PydanticUserError: TITerminalStatePayload needs a discriminator), so its DAG processor dies at start.
held=("fastapi<0.137" "cadwyn<8")
# The tests the oldest venv runs need pytest too.
"$python" -m pip install --dry-run --ignore-installed --quiet --report "$report" ".[airflow]" "${floors[@]}" \
  "${held[@]}" pytest pytest-timeout
{
  echo "# The oldest supported set, resolved by ./scripts/oldest-constraints.sh on $(date -u +%Y-%m-%d)"
  echo "# (CPython $("$python" -c 'import platform; print(platform.python_version())')). Floors: ${floors[*]}"
  echo "# Held: ${held[*]}"
  "$python" - "$report" <<'PY'
import json, sys
installed = json.load(open(sys.argv[1]))["install"]
for name, version in sorted((i["metadata"]["name"].lower(), i["metadata"]["version"]) for i in installed):
    if name != "eosbatch":
        print(f"{name}=={version}")
PY
} > constraints/oldest.txt
echo "constraints/oldest.txt: $(grep -c '==' constraints/oldest.txt) packages (${floors[*]}; held ${held[*]})"
