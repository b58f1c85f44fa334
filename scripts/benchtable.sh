#!/usr/bin/env bash
# Turns `go test -bench` output into an aligned table: one row a benchmark,
# one column a metric (ns/op, MB/s, and every b.ReportMetric unit). It ends
# with the figures issue 40 set targets for, each beside its target.
set -euo pipefail
awk '
/^pkg: / { pkg = $2 }
/^Benchmark/ {
  name = $1; sub(/-[0-9]+$/, "", name)
  row = sprintf("%-60s", pkg ? substr(pkg, index(pkg, "worker/") + 7) "." name : name)
  for (i = 3; i + 1 <= NF; i += 2) {
    row = row sprintf("  %14s %-12s", $i, $(i + 1))
    got[name "|" $(i + 1)] = $i
  }
  print row
}
/^(FAIL|ok|PASS)/ { next }
function fig(key, unit,   v) { v = got[key]; return v == "" ? "(not run)" : v unit }
END {
  print ""
  print "targets (issue 40):"
  printf "  plain-task bundle, forked ping (exit holder included): %s a trivial Go binary (target <= 2.5x)\n", fig("BenchmarkStartup/plain_bundle|task-x", "x")
  printf "  standard build, peak RSS of --airflow-metadata: %s (target <= 6.5 MiB)\n", fig("BenchmarkStartup/standard|rss-MiB", " MiB")
  printf "  local sandbox create + exec true + destroy: %s raw bubblewrap (target <= 2.5x); %s without a filesystem of its own, which costs %s\n", fig("BenchmarkCreateExecDestroy|x-bwrap", "x"), fig("BenchmarkCreateExecDestroy|nodisk-x-bwrap", "x"), fig("BenchmarkCreateExecDestroy|disk-ms-median", " ms")
}
'
