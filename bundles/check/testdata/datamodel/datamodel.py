"""Dags whose assets and mapping the bundle (datamodel.yaml) gets wrong,
once each, next to ones it gets right: check's data-model findings."""

from __future__ import annotations

from airflow.sdk import Asset, dag, task


@task.stub(queue="golang", outlets=[Asset("s3://b/converted/")])
def export_normalised(): ...


@task.stub(queue="golang", outlets=[Asset("s3://b/ok")])
def export_ok(): ...


@task.stub(queue="golang")
def export_undeclared(): ...


@dag(dag_id="dm_assets", schedule=None)
def dm_assets():
    export_normalised()
    export_ok()
    export_undeclared()


dm_assets()


@task.stub(queue="golang")
def lister(): ...


@task.stub(queue="golang")
def feeder(): ...


@task.stub(queue="golang")
def convert(sandbox=None, owner=None): ...


@task()
def python_mapped(item):
    return item


@dag(dag_id="dm_mapping", schedule=None)
def dm_mapping():
    # One lister for both: a second call would be a second task, lister__1.
    listed = lister()
    convert.override(task_id="good").expand(sandbox=listed)
    convert.override(task_id="unbound").expand(sandbox=listed)
    convert.override(task_id="literal").expand(sandbox=["a", "b"])
    convert.override(task_id="kwargs").expand_kwargs([{"sandbox": "a"}])
    convert.override(task_id="cross").expand(sandbox=["a"], owner=["x", "y"])
    python_mapped.expand(item=feeder())
    convert.override(task_id="unmapped")()


dm_mapping()
