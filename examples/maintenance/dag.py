"""
Maintenance: remove what failed runs left behind, every five minutes.

The Go bundle packed from ``examples/maintenance/bundle.yaml`` carries the
built-in ``airflow_go_worker_sweep`` Dag (its ``sweep:`` section says which
backends and storage prefixes to clear). Its one task ``sweep``:

* destroys the sandboxes whose owner Dag run has ended (Airflow answers the
  task's ``GetDagRunState`` through its supervisor, so the task needs no
  Airflow credentials) or whose lifetime is over: a worker killed mid-task,
  a broker outage that kept ``collect`` from ever starting, a bundle missing
  on one worker all leave such sandboxes;
* keeps every sandbox whose run is queued or running, or whose run's state
  it cannot learn;
* removes the leftovers of interrupted transfers (``.partial`` objects,
  unfinished multipart uploads) older than ``older_than``;

and logs each removal with its reason. Trigger it with ``{"dry_run": true}``
to see what it would remove; a run may set nothing else.

Connections: ``modal_default`` (the Modal workspace) and ``aws_default``
(the S3 bucket).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag, task


@task.stub(queue="golang", retries=1, retry_delay=timedelta(minutes=1))
def sweep(): ...


@dag(
    dag_id="airflow_go_worker_sweep",
    schedule="*/5 * * * *",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=30),
    tags=["go", "maintenance"],
)
def airflow_go_worker_sweep():
    sweep()


airflow_go_worker_sweep()
