"""
Data-aware scheduling with a Go task: runs whenever ``sandbox_conversion``
(``examples/conversion``) has converted orders to S3.

``sandbox_conversion``'s ``convert`` declares the asset ``converted_orders``
as its outlet. When it succeeds, Airflow records an asset event whose
``extra`` names the objects it wrote (``urls``, ``bytes``, ``files``), and
the scheduler starts a run of this Dag (its run id begins with
``asset_triggered__``).

``report`` (``kind: convert`` in ``bundle.yaml``) reads that event: its
input ``stage_in[in/orders.jsonl]`` is bound to the event's
``extra.urls.0`` (the JSON Lines file the conversion wrote), so it stages
exactly the object this run was triggered for into a sandbox with no
network, totals the orders per customer and writes ``totals.csv`` to S3
under the run's own key.

Connections (resolved by the Go task at run time, never stored in the Dag):

* ``aws_default``: the S3 bucket holding the converted orders and receiving
  the report.
* ``modal_default``: the Modal workspace the sandbox runs in.

Triggered by hand, the run has no asset event: ``report`` then has nothing
staged as ``in/orders.jsonl`` and fails, saying the file is missing.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Asset, dag, task

# The same asset (name and URI) as examples/conversion's outlet.
converted_orders = Asset(name="converted_orders", uri="s3://airflow-artifacts/converted")


@task.stub(queue="golang", retries=2, retry_delay=timedelta(minutes=1))
def report(): ...


@dag(
    dag_id="orders_report",
    schedule=[converted_orders],
    tags=["sandbox", "go", "assets"],
)
def orders_report():
    report()


orders_report()
