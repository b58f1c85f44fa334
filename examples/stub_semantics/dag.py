"""
What a Dag author sets on a Go stub takes effect as it does on a Python
task: each Go stub below runs beside its Python ``@task`` twin, and the two
end the same way.

Airflow 3.3 applies these attributes in its Python task runner, which a Go
task replaces, and hands the executable none of them. So the Go side
(``bundle.yaml``) declares each one again, and ``airflow-go-worker check``
compares the two: a stub attribute the bundle config does not match is a
finding before anything runs.

* **execution_timeout** (``go_sleep`` / ``py_sleep``): a conversion whose
  command hangs (``sleep 600``). At 10 s the Go task's context ends, the
  command stops, the sandbox is destroyed, and the task fails naming
  ``execution_timeout``; Airflow retries it once (``retries=1``) and the
  retry ends the same way, as the Python task's ``AirflowTaskTimeout``
  does. Nothing is exported. (``bundle.yaml``: ``execution_timeout: 10s``.)
  These two tasks fail on purpose, so every run of this Dag ends ``failed``.
* **a branch** (``go_branch`` / ``py_branch``): ``go_branch`` is a ``run``
  task declared ``branch: [go_left, go_right, go_join]`` with ``go_join``
  after ``go_left`` (``branch_joins``); it follows the task ids its
  command prints on its last line. The runtime has Airflow skip the
  others and leaves the ``skipmixin_key`` XCom, as ``@task.branch`` does:
  ``go_left`` and the join run, ``go_right`` is skipped.
* **multiple_outputs and a Dag param's default** (``go_env`` /
  ``py_env``): each key of the result (``exit_code``, ``output_tail``,
  ``timed_out``) is an XCom of its own, so ``go_env(...)["output_tail"]``
  hands one key downstream. ``go_env``'s ``env`` is bound to the Dag param
  ``run_env`` (``inputs: {env: {param: run_env}}``): a run whose
  ``dag_run.conf`` sets ``run_env`` runs with that, and one that does not
  gets the param's default, which the bundle config carries as the
  ``env`` default (``check`` compares the two).

``provision`` is the setup of the sandbox ``go_branch`` and ``go_env`` run
in, ``destroy`` its teardown.

Connections: ``aws_default`` (the S3 bucket ``go_sleep`` would export to)
and ``modal_default`` (the Modal workspace the sandboxes run in).
"""

from __future__ import annotations

import subprocess
import time
from datetime import timedelta

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import Param, dag, task

# The command go_env runs in its sandbox (bundle.yaml's go_env command),
# which py_env runs here.
ENV_COMMAND = 'echo "region=$REGION"'


@task.stub(queue="golang", execution_timeout=timedelta(seconds=10), retries=1, retry_delay=timedelta(seconds=1))
def go_sleep(): ...


@task(execution_timeout=timedelta(seconds=10), retries=1, retry_delay=timedelta(seconds=1))
def py_sleep():
    time.sleep(600)


@task.stub(queue="golang")
def provision(): ...


@task.stub(queue="golang")
def go_branch(sandbox: str): ...


@task.branch()
def py_branch():
    return "py_left"


@task.stub(queue="golang", multiple_outputs=True)
def go_env(sandbox: str): ...


@task(multiple_outputs=True)
def py_env(params=None):
    done = subprocess.run(["/bin/sh", "-c", ENV_COMMAND], env=params["run_env"], capture_output=True, text=True, check=True)
    return {"exit_code": done.returncode, "output_tail": done.stdout, "timed_out": False}


@task()
def read_region(output_tail: str) -> str:
    return output_tail.strip()


# A teardown (below): Airflow sets its trigger rule, all_done_setup_success.
@task.stub(queue="golang")
def destroy(sandbox: str): ...


def branch_targets(side: str):
    """The branch's downstream tasks: left and right, and a join after left."""
    left, right = EmptyOperator(task_id=f"{side}_left"), EmptyOperator(task_id=f"{side}_right")
    join = EmptyOperator(task_id=f"{side}_join", trigger_rule="none_failed_min_one_success")
    left >> join
    return [left, right, join], join


@dag(
    dag_id="stub_semantics",
    schedule=None,
    params={"run_env": Param({"REGION": "north"}, type="object", description="the environment of go_env's and py_env's command")},
    tags=["go", "semantics"],
)
def stub_semantics():
    go_sleep()
    py_sleep()

    handle = provision()
    go_targets, go_join = branch_targets("go")
    go_branch(sandbox=handle) >> go_targets
    py_targets, _ = branch_targets("py")
    py_branch() >> py_targets

    go_region = read_region.override(task_id="read_go_region")(go_env(sandbox=handle)["output_tail"])
    read_region.override(task_id="read_py_region")(py_env()["output_tail"])

    [go_join, go_region] >> destroy(sandbox=handle).as_teardown(setups=handle)


stub_semantics()
