"""
What ``airflow-go-worker check`` refuses, run anyway on a real scheduler
(make airflow-e2e): the proof that each refusal is needed, and that what
does work for a Go task works. Not an example to copy.

* ``go_echo`` is mapped with ``.expand_kwargs()``: Airflow 3.3 hands an
  executable no mapped argument, so an instance cannot know its element.
  Each instance fails at once, saying what to write instead, rather than
  succeeding having processed nothing. Its twin ``py_echo``, a Python task
  mapped the same way, gets its element in every instance.
* ``go_echo`` sets a task-level ``on_failure_callback``: Airflow runs it in
  its Python task runner, which a Go task replaces, so it never runs
  (check refuses it). The Dag-level ``on_failure_callback`` does: the
  scheduler has the dag-processor run it once the run has failed. Each
  records that it ran in an Airflow Variable.
"""

from __future__ import annotations

import json

from airflow.sdk import Variable, dag, task

ELEMENTS = [{"message": "first"}, {"message": "second"}]


def record(key: str, context) -> None:
    ti = context.get("ti")
    Variable.set(key, json.dumps({"run_id": context["run_id"], "reason": context.get("reason"), "task_id": ti.task_id if ti else None}))


def record_run_failure(context):
    record("stub_refused_run_failed", context)


def record_task_failure(context):
    record("stub_refused_task_failed", context)


@task.stub(queue="golang", on_failure_callback=record_task_failure)
def go_echo(message: str): ...


@task()
def py_echo(message: str) -> str:
    return message


@dag(dag_id="stub_refused", schedule=None, on_failure_callback=record_run_failure, tags=["go", "e2e"])
def stub_refused():
    go_echo.expand_kwargs(ELEMENTS)
    py_echo.expand_kwargs(ELEMENTS)


stub_refused()
