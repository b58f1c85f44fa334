"""One Go task, served by a bundle whose config may not load (check_test.go)."""

from airflow.sdk import dag, task


@task.stub(queue="golang")
def make(): ...


@dag(dag_id="loads", schedule=None)
def loads():
    make()


loads()
