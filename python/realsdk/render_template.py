"""Render templates with Airflow's own template context, for
bundles/template_test.go, which compares the bundle's rendering of the same
templates with these.

Usage: render_template.py CASES.json OUT.json

Each case: {template, dag_id, task_id, run_id, run_type, try_number,
map_index, logical_date, data_interval_start, data_interval_end, run_after
(ISO 8601 or null), conf}. The task instance is built as Airflow's Dag
processor builds one to run a callback (RuntimeTaskInstance with the
server's TIRunContext), its context is get_template_context()'s, and the
template is rendered by the task's render_template, in the Dag's Jinja
environment. OUT.json gets, per case, {"rendered": ...} or {"error": ...}.
"""

from __future__ import annotations

import json
import sys
import uuid
from datetime import datetime

from airflow.sdk import DAG
from airflow.sdk.api.datamodels._generated import DagRun, TIRunContext
from airflow.sdk.bases.operator import BaseOperator
from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance


def _time(s):
    return datetime.fromisoformat(s) if s else None


def render(case: dict) -> dict:
    with DAG(case["dag_id"], schedule=None):
        task = BaseOperator(task_id=case["task_id"])
    run = DagRun(
        dag_id=case["dag_id"], run_id=case["run_id"], run_type=case["run_type"], state="running",
        logical_date=_time(case.get("logical_date")), data_interval_start=_time(case.get("data_interval_start")),
        data_interval_end=_time(case.get("data_interval_end")), run_after=_time(case["run_after"]),
        start_date=_time(case["run_after"]), end_date=None, clear_number=0, conf=case.get("conf") or {},
        consumed_asset_events=[], partition_key=None,
    )
    ti = RuntimeTaskInstance.model_construct(
        id=uuid.uuid4(), task_id=case["task_id"], dag_id=case["dag_id"], run_id=case["run_id"],
        try_number=case["try_number"], map_index=case["map_index"], dag_version_id=uuid.uuid4(), task=task,
        _ti_context_from_server=TIRunContext.model_construct(dag_run=run, max_tries=1),
    )
    try:
        return {"rendered": task.render_template(case["template"], ti.get_template_context())}
    except Exception as e:  # what Airflow's rendering raises is the answer
        return {"error": f"{type(e).__name__}: {e}"}


def main() -> int:
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    with open(sys.argv[2], "w") as f:
        json.dump([render(c) for c in cases], f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
