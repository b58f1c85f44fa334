"""
Artifact conversion in a sandbox, implemented by the Go bundle's standard
``convert`` task (``examples/conversion/bundle.yaml``).

One task does the whole job: it provisions a sandbox, streams the input from
S3 into it, runs the conversion with no network, streams the outputs back to
S3 (all or nothing: nothing lands unless every output was written) and
destroys the sandbox, also when something failed.

``convert`` declares the asset ``converted_orders`` as its outlet (here and
under ``outlets:`` in ``bundle.yaml``): when it succeeds, Airflow records an
asset event whose ``extra`` lists what it wrote (``urls``, ``bytes``,
``files``), and ``examples/orders_report`` runs on it.

Connections (resolved by the Go task at run time, never stored in the Dag):

* ``aws_default``: the S3 bucket holding the input and receiving the outputs.
* ``modal_default``: the Modal workspace the sandbox runs in.

Nothing can be set per run: ``bundle.yaml`` gives ``convert`` no ``conf:``
list, so a ``dag_run.conf`` key naming one of its inputs (``{"backend":
"local"}``, which would move the sandbox onto the worker itself, say) fails
the task before it starts. To convert on the worker, the Dag author sets
``backend: local`` in the bundle config (``make demo`` does, in a copy).
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Asset, dag, task

# The same asset (name and URI) as examples/orders_report's schedule.
converted_orders = Asset(name="converted_orders", uri="s3://airflow-artifacts/converted")


@task.stub(queue="golang", retries=2, retry_delay=timedelta(minutes=1), outlets=[converted_orders])
def convert(): ...


@task()
def announce(result: dict) -> list[str]:
    # The Go task returns {"urls": [...], "exit_code": 0, "output_tail": "..."}.
    for url in result["urls"]:
        print(f"converted artifact: {url}")
    return result["urls"]


@dag(
    dag_id="sandbox_conversion",
    schedule=None,
    tags=["sandbox", "go"],
)
def sandbox_conversion():
    announce(convert())


sandbox_conversion()
