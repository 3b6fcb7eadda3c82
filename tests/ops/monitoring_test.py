#!/usr/bin/python3
"""The shipped monitoring files (packaging/monitoring/): the Prometheus alerting rules pass
`promtool check rules`; the Grafana dashboard is valid JSON whose every query is valid PromQL
(checked by promtool as recording rules); and every gpucache_* metric either names is one the
daemon exports (docs/metrics.md's table, which tests/ops/metrics_test.cc holds to the daemon).
Run with Debian's python3: tests/ops/monitoring_test.py SOURCE_DIR"""
import json
import os
import re
import subprocess
import sys
import tempfile

src = sys.argv[1]
mon = os.path.join(src, "packaging", "monitoring")
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def promtool(path):
    r = subprocess.run(["promtool", "check", "rules", path], capture_output=True, text=True)
    return r.returncode == 0, r.stdout + r.stderr


rules = os.path.join(mon, "gpucache-rules.yml")
ok, out = promtool(rules)
check(ok, "promtool check rules gpucache-rules.yml: " + out)

with open(os.path.join(mon, "gpucache-dashboard.json")) as f:
    dash = json.load(f)
exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
check(len(exprs) >= 8, "the dashboard has %d queries" % len(exprs))
check(len({p["id"] for p in dash["panels"]}) == len(dash["panels"]), "panel ids repeat")
with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as tmp:
    tmp.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, e in enumerate(exprs):
        tmp.write("      - record: dashboard:q%d\n        expr: %s\n" % (i, json.dumps(e.replace("$instance", ".*"))))
ok, out = promtool(tmp.name)
os.unlink(tmp.name)
check(ok, "a dashboard query is not valid PromQL: " + out)

with open(os.path.join(src, "docs", "metrics.md")) as f:
    # The first column of the metric table: one or more `name`s.
    documented = {n for row in re.findall(r"^\| (`gpucache_[^|]*)\|", f.read(), re.M)
                  for n in re.findall(r"`(gpucache_[a-z_]+)`", row)}
with open(rules) as f:
    used = set(re.findall(r"gpucache_[a-z_]+", f.read())) | {m for e in exprs for m in re.findall(r"gpucache_[a-z_]+", e)}
for name in sorted(used):
    base = re.sub(r"_(bucket|sum|count)$", "", name)
    check(name in documented or base in documented, "%s is not a metric in docs/metrics.md" % name)

for f in failures:
    print("FAIL:", f)
print("monitoring: %d passed, %d failed" % (3 + len(used) - len(failures), len(failures)))
sys.exit(1 if failures else 0)
