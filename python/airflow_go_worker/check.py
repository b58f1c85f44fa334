"""Check stub Dags against Go bundles from Python tests.

``airflow-go-worker check`` finds the wiring mistakes Airflow does not
report: a stub task no bundle registers, a Dag no bundle lists, a Dag two
bundles list, a stub on a queue no coordinator serves, an input bound to
the XCom of a task that is not upstream, and what a stub sets that a Go
task would silently go without (execution_timeout, task callbacks, call
arguments Airflow 3.3 drops, param defaults, ...). This module runs it with the
python running the tests (which must have Airflow), so a Dag repository's
tests can hold the wiring::

    from airflow_go_worker.check import assert_wired

    def test_go_tasks_are_wired():
        assert_wired(dags=["dags"], executables_roots=["dist"], queues=["golang"])

Put this repository's ``python/`` directory on ``PYTHONPATH`` (or copy
this file). The airflow-go-worker binary (any bundle built with
airflow-go-worker has the command too) comes from ``binary``, else
``$AIRFLOW_GO_WORKER_BIN``, else ``airflow-go-worker`` on ``PATH``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from typing import Any

BIN_ENV = "AIRFLOW_GO_WORKER_BIN"


class CheckError(Exception):
    """The check could not run (no binary, no Airflow, a bad argument)."""


def _binary(binary: str | None) -> str:
    found = binary or os.environ.get(BIN_ENV) or shutil.which("airflow-go-worker")
    if not found:
        raise CheckError(
            f"no airflow-go-worker binary: pass binary=, set {BIN_ENV}, or put airflow-go-worker on PATH "
            "(make build writes bin/airflow-go-worker)"
        )
    return found


def check(
    dags: Iterable[str],
    executables_roots: Iterable[str] = (),
    queues: Iterable[str] = (),
    binary: str | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run the check and return its report.

    The report's ``findings`` are dicts with ``kind``, ``file``, ``dag_id``,
    ``task_id``, ``problem`` and ``fix``; ``notes`` say what could not be
    checked. ``executables_roots`` default to the coordinators' own
    (Airflow's ``[sdk] coordinators``); ``queues`` are treated as routed to
    the Go coordinator whatever Airflow's configuration says.
    """
    args = [_binary(binary), "check", "--format", "json", "--python", sys.executable]
    for flag, values in (("--dags", dags), ("--executables-root", executables_roots), ("--queue", queues)):
        for v in values:
            args += [flag, os.fspath(v)]
    proc = subprocess.run(args, capture_output=True, text=True, env=None if env is None else dict(env))
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        raise CheckError(f"{' '.join(args)} failed (exit {proc.returncode}): {proc.stderr.strip()}") from None
    return report


def format_findings(report: Mapping[str, Any]) -> str:
    """The findings as the command prints them."""
    lines = []
    for f in report.get("findings") or []:
        where = f["file"]
        if f.get("dag_id"):
            where += f": Dag {f['dag_id']}"
        if f.get("task_id"):
            where += f", task {f['task_id']}"
        lines.append(f"{where}: {f['problem']}\n    fix: {f['fix']}")
    return "\n\n".join(lines)


def assert_wired(dags: Iterable[str], **kwargs: Any) -> dict[str, Any]:
    """Fail (AssertionError naming every finding) unless the check finds nothing.

    Takes the arguments of ``check``.
    """
    report = check(dags, **kwargs)
    findings = report.get("findings") or []
    assert not findings, f"{len(findings)} wiring finding(s):\n\n" + format_findings(report)
    return report
