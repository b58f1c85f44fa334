"""
Go functions as Airflow tasks.

    fetch_orders >> rank_customers >> publish_ranking >> cleanup
    latest_conversion, latest_conversion_in_python

The tasks are ``@task.stub(queue="golang")``: their code is the Go bundle
built from ``examples/go_tasks/main.go``, registered under the same dag_id
and task ids: three Go functions of its own and ``cleanup``, a task of the
standard catalogue (kind ``sweep``). Values flow between them through XCom: each Go task
reads its upstream's ``return_value`` itself (``bundles.WithXCom`` in
``main.go``), because Airflow 3.3 drops a stub call's arguments; on 3.4 the
arguments below arrive too, bound by name, and carry the same values:

* ``fetch_orders`` reads ``orders.csv`` from S3 (connection ``aws_default``)
  and returns the total per customer;
* ``rank_customers(totals=...)`` ranks them inside a throwaway Modal sandbox
  (connection ``modal_default``);
* ``publish_ranking(ranking=...)`` writes the ranking back to S3 and returns
  its URL;
* ``cleanup`` (trigger rule ``all_done``) removes any sandbox this run left
  behind, e.g. when ``rank_customers`` was killed before its own cleanup.

``latest_conversion`` reads the latest event of the asset
``converted_orders``, which ``examples/conversion`` updates: the run that
wrote it and the URLs it wrote (``bundles.Client``'s ``GetAssetEvents``,
any asset's events, as a Python task's ``inlet_events``). Its Python twin
``latest_conversion_in_python`` reads the same through ``inlet_events``,
which needs the asset among its ``inlets``; both return null before the
first conversion.
"""

from __future__ import annotations

from airflow.sdk import Asset, dag, task

# The asset examples/conversion's convert updates (its name and URI).
converted_orders = Asset(name="converted_orders", uri="s3://airflow-artifacts/converted")


@task.stub(queue="golang")
def fetch_orders(): ...


@task.stub(queue="golang")
def rank_customers(totals: dict): ...


@task.stub(queue="golang")
def publish_ranking(ranking: list): ...


@task.stub(queue="golang", trigger_rule="all_done")
def cleanup(): ...


@task.stub(queue="golang")
def latest_conversion(): ...


@task(inlets=[converted_orders])
def latest_conversion_in_python(inlet_events=None):
    events = inlet_events[converted_orders]
    if not events:
        return None
    e = events[-1]
    return {"source_dag_id": e.source_dag_id, "source_run_id": e.source_run_id, "source_task_id": e.source_task_id, "urls": e.extra.get("urls")}


@dag(dag_id="go_tasks_example", schedule=None, tags=["go"])
def go_tasks_example():
    publish_ranking(ranking=rank_customers(totals=fetch_orders())) >> cleanup()
    latest_conversion()
    latest_conversion_in_python()


go_tasks_example()
