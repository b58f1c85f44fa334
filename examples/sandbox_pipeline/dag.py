"""
A sandbox pipeline in Go tasks only, no Python in the loop.

    provision (setup) >> run >> collect (teardown)

* ``provision`` (``kind: provision`` in ``bundle.yaml``) creates a sandbox
  owned by this Dag run, stages ``orders.csv`` into it from S3 and returns the
  sandbox id; it also pushes the sandbox record (backend, id, workdir, ...)
  under the XCom key ``sandbox``.
* ``run`` (``kind: run``) totals the orders per customer inside the sandbox,
  with no network.
* ``collect`` (``kind: collect``) runs whatever happened to ``run``: it
  exports ``totals.csv`` to S3 under the run's own key and destroys the
  sandbox, even when ``run`` or the export failed.

``provision`` is the setup task and ``collect`` its teardown
(``.as_teardown(setups=handle)``), so the run's state is ``run``'s: a failed
``run`` fails the run although ``collect`` succeeds. (Under a plain
``trigger_rule=all_done``, ``collect`` was the only leaf and a run whose
``run`` failed ended success.) Airflow gives a teardown the trigger rule
``all_done_setup_success``: ``collect`` runs once everything before it is
done, if ``provision`` succeeded. A ``provision`` that failed has destroyed
any sandbox it made and returned no id for ``collect`` to take; one killed
with its worker leaves its sandbox to the maintenance Dag
(``examples/maintenance``), which removes it once the run has ended. A
teardown's own failure does not decide the run either: if the export fails
after ``run`` succeeded, ``collect`` shows failed and the run success.

``run`` and ``collect`` find the sandbox through the bundle config
(``inputs: {sandbox: {xcom: provision}}``), which reads provision's
``return_value`` XCom at run time. That works on Airflow 3.3, which drops
the arguments of a stub call; on 3.4 the ``sandbox=handle`` arguments below
arrive as well and bind the same value. Passing them also draws the
provision -> run -> collect edges. The three tasks name the same backend
and connection in ``bundle.yaml``.

Connections: ``aws_default`` (the S3 bucket) and ``modal_default`` (the Modal
workspace the sandbox runs in).

Nothing can be set per run: no task has a ``conf:`` list in ``bundle.yaml``,
so a ``dag_run.conf`` key naming an input of a task (``{"backend":
"local"}``, which would move the sandbox onto the worker itself, say) fails
it before it starts.
"""

from __future__ import annotations

from airflow.sdk import dag, task


@task.stub(queue="golang")
def provision(): ...


@task.stub(queue="golang")
def run(sandbox: str): ...


# A teardown (below): Airflow sets its trigger rule, all_done_setup_success.
@task.stub(queue="golang")
def collect(sandbox: str): ...


@dag(dag_id="sandbox_pipeline", schedule=None, tags=["sandbox", "go"])
def sandbox_pipeline():
    handle = provision()
    run(sandbox=handle) >> collect(sandbox=handle).as_teardown(setups=handle)


sandbox_pipeline()
