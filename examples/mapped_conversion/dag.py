"""
Dynamic task mapping with a Go task: convert each of N objects in a sandbox
of its own, in parallel, and collect the results.

    list_objects >> convert (mapped, one instance per object) >> summarize

* ``list_objects`` (``kind: list``) is a Go task too: it lists the CSVs under
  ``s3://airflow-artifacts/incoming/regions/`` and returns their URLs,
  sorted, leaving out an export still in flight. Any upstream returning a
  list of URLs does instead (a Python ``@task``, ``S3ListOperator``).
* ``convert`` (``kind: convert`` in ``bundle.yaml``) is mapped over that list
  with ``.expand(stage_in=...)``. Airflow does not hand an executable task its
  element, so the bundle config binds it: ``stage_in[in/data.csv]: {xcom:
  list_objects, expand: true}`` stages instance i's URL in as
  ``in/data.csv``. Each instance converts its file to JSON Lines with no
  network and writes it under the run's key and its map index; the UI names
  each instance by its object (``map_index: "{stage_in[in/data.csv]}"``).
* ``summarize`` receives every instance's result as a list, in map-index
  order.

``check`` compares the stub's ``.expand()`` with the bundle config and
refuses a mismatch (another list, or an input bound without ``expand``)
before a run.

Connections (resolved by the Go task at run time, never stored in the Dag):

* ``aws_default``: the S3 bucket listed, holding the inputs and receiving
  the outputs.
* ``modal_default``: the Modal workspace the sandboxes run in.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task


@task.stub(queue="golang")
def list_objects(): ...


@task.stub(queue="golang", retries=2, retry_delay=timedelta(minutes=1))
def convert(stage_in): ...


@task()
def summarize(results: list[dict]) -> list[str]:
    # Each Go instance returns {"urls": [...], "exit_code": 0, "output_tail": "..."}.
    urls = [url for result in results for url in result["urls"]]
    for url in urls:
        print(f"converted: {url}")
    return urls


@dag(
    dag_id="mapped_conversion",
    schedule=None,
    tags=["sandbox", "go", "mapping"],
)
def mapped_conversion():
    summarize(convert.expand(stage_in=list_objects()))


mapped_conversion()
