#!/usr/bin/env bash
# Checks the monitoring files operators load: promtool validates the
# Prometheus configuration and the alerting rules and runs the rules' unit
# tests; the Grafana dashboard must be JSON with at least one query per
# panel. (Whether each query names a metric verdict exports is checked
# against a live server by //tests:prometheus_e2e_test.)
#
#   prometheus_config_test.sh PROMETHEUS_YML ALERTS_YML ALERTS_TEST_YML DASHBOARD_JSON
set -euo pipefail
config=$1 rules=$2 rules_test=$3 dashboard=$4
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v promtool > /dev/null || fail "promtool is missing (tools/setup.sh installs Debian's prometheus)"

promtool check config "$config" || fail "promtool check config $config"
promtool check rules "$rules" || fail "promtool check rules $rules"
promtool test rules "$rules_test" || fail "promtool test rules $rules_test"

python3 - "$dashboard" <<'PY' || fail "dashboard $dashboard"
import json, sys
with open(sys.argv[1]) as f:
    dashboard = json.load(f)
panels = [p for p in dashboard["panels"] if p.get("type") != "row"]
assert panels, "no panels"
for p in panels:
    exprs = [t.get("expr", "") for t in p.get("targets", [])]
    assert exprs and all(exprs), f"panel {p.get('title')!r} has an empty query"
ids = [p["id"] for p in dashboard["panels"]]
assert len(ids) == len(set(ids)), "panel ids repeat"
print(f"dashboard: {len(panels)} panels, "
      f"{sum(len(p['targets']) for p in panels)} queries")
PY
echo PASS
