#!/usr/bin/env bash
# Turns `go test -bench` output into an aligned table: one row a benchmark,
# one column a metric (ns/op, MB/s, and every b.ReportMetric unit).
set -euo pipefail
awk '
/^pkg: / { pkg = $2 }
/^Benchmark/ {
  name = $1; sub(/-[0-9]+$/, "", name)
  row = sprintf("%-60s", pkg ? substr(pkg, index(pkg, "worker/") + 7) "." name : name)
  for (i = 3; i + 1 <= NF; i += 2) row = row sprintf("  %14s %-12s", $i, $(i + 1))
  print row
}
/^(FAIL|ok|PASS)/ { next }
'
