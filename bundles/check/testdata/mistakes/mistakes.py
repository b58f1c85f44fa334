"""Every wiring mistake check finds, each once (check_test.go)."""

from airflow.sdk import dag, task


@task.stub(queue="golang")
def a(): ...


@task.stub(queue="golang")
def b(): ...


@task.stub(queue="golang")
def extra(): ...


@task.stub(queue="gopher")
def lost(): ...


@task(queue="golang")
def python_on_go():
    return 1


@task.stub(queue="nowhere")
def misrouted(): ...


@dag(dag_id="wired", schedule=None)
def wired():
    a() >> extra()
    b()  # not downstream of a, though the bundle binds b's sandbox to a's XCom
    lost()
    python_on_go()
    misrouted()


wired()


@dag(dag_id="orphan", schedule=None)
def orphan():
    a()


orphan()


@dag(dag_id="twice", schedule=None)
def twice():
    a()


twice()
