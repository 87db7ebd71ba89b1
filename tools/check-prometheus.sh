#!/usr/bin/env bash
# The fleet view's checks: the rules file is valid Prometheus (promtool check rules), its unit
# tests pass (promtool test rules), every rule is tested, and every query of the Grafana
# dashboard is a recording rule of the file (or an expression of it), so the tests check what
# the dashboard draws. promtool is in Debian's `prometheus` package (`bash .ci/run` installs it).
# Prints one summary line; on a failure, what failed and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."

rules=contrib/prometheus/cri-bridge.rules.yml
dashboard=contrib/grafana/cri-bridge.json
tests=(contrib/prometheus/tests/*.yml)

command -v promtool >/dev/null || {
  echo "promtool is missing: apt-get install prometheus (bash .ci/run installs it)" >&2
  exit 1
}
command -v python3 >/dev/null || { echo "python3 is missing" >&2; exit 1; }

if ! out=$(promtool check rules "$rules" 2>&1); then
  echo "$out" >&2
  echo "check-prometheus: FAILED: promtool check rules $rules" >&2
  exit 1
fi
if ! out=$(promtool test rules "${tests[@]}" 2>&1); then
  echo "$out" >&2
  echo "check-prometheus: FAILED: promtool test rules ${tests[*]}" >&2
  exit 1
fi

summary=$(python3 - "$rules" "$dashboard" "${tests[@]}" <<'EOF'
import json
import re
import sys

rules_path, dashboard_path, test_paths = sys.argv[1], sys.argv[2], sys.argv[3:]
lines = open(rules_path).read().splitlines()

# The rules file without a YAML library: `- record: NAME`, `- alert: NAME`, and each `expr:`,
# on its line or as an indented block (`expr: |`).
records, alerts, exprs = set(), set(), set()
i = 0
while i < len(lines):
    line = lines[i]
    if m := re.match(r"\s*- record: (\S+)\s*$", line):
        records.add(m.group(1))
    elif m := re.match(r"\s*- alert: (\S+)\s*$", line):
        alerts.add(m.group(1))
    elif m := re.match(r"(\s*)expr: (.*)$", line):
        indent, value = len(m.group(1)), m.group(2).strip()
        if value in ("|", ">", "|-", ">-"):
            block = []
            while i + 1 < len(lines) and (not lines[i + 1].strip() or len(lines[i + 1]) - len(lines[i + 1].lstrip()) > indent):
                i += 1
                block.append(lines[i].strip())
            value = " ".join(block)
        exprs.add(" ".join(value.split()))
    i += 1

failures = []

# Every rule is exercised by a test: alerts by name, recording rules in a tested expression.
tested = "\n".join(open(p).read() for p in test_paths)
for alert in sorted(alerts):
    if not re.search(r"alertname: " + re.escape(alert) + r"\s*$", tested, re.M):
        failures.append(f"alert {alert} has no alert_rule_test in {' '.join(test_paths)}")
for record in sorted(records):
    if not re.search(r"expr: " + re.escape(record) + r"(\{|\s*$)", tested, re.M):
        failures.append(f"recording rule {record} has no promql_expr_test in {' '.join(test_paths)}")

# The dashboard's template variables, substituted the same way everywhere: the node filter is
# the only selector a query may add to a rule; $__rate_interval is the rules' window.
SUBSTITUTIONS = [('{instance=~"$instance"}', ""), ("$__rate_interval", "5m")]

def known(expr):
    for variable, value in SUBSTITUTIONS:
        expr = expr.replace(variable, value)
    expr = " ".join(expr.split())
    return "$" not in expr and (expr in records or expr in exprs)

dashboard = json.load(open(dashboard_path))
queries = 0
def panels(items):
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))
for panel in panels(dashboard.get("panels", [])):
    name = f"panel {panel.get('title')!r} (id {panel.get('id')})"
    if panel.get("type") != "row" and panel.get("datasource", {}).get("uid") != "${DS_PROMETHEUS}":
        failures.append(f"{name}: its datasource is not ${{DS_PROMETHEUS}}")
    for target in panel.get("targets", []):
        queries += 1
        expr = target.get("expr", "")
        if not known(expr):
            failures.append(f"{name}, query {target.get('refId')}: {expr!r} is neither a recording rule nor an expression of {rules_path}")
for variable in dashboard.get("templating", {}).get("list", []):
    query = variable.get("query")
    if variable.get("type") == "query":
        text = query.get("query", "") if isinstance(query, dict) else query
        m = re.fullmatch(r"label_values\((\S+), (\w+)\)", text)
        if not (m and known(m.group(1))):
            failures.append(f"variable {variable.get('name')!r}: {text!r} is not label_values of a recording rule")
if dashboard.get("schemaVersion", 0) < 39:
    failures.append(f"{dashboard_path}: schemaVersion {dashboard.get('schemaVersion')} (39 or later expected)")

if failures:
    print("\n".join(failures), file=sys.stderr)
    print(f"check-prometheus: FAILED: {len(failures)} problem(s)", file=sys.stderr)
    sys.exit(1)
print(f"{len(records)} recording rules and {len(alerts)} alerts, each tested; {queries} dashboard queries, each from the rules file")
EOF
)
echo "check-prometheus: OK: $rules valid; ${#tests[@]} test files pass; $summary (${SECONDS}s)"
