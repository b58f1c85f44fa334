"""
A sandbox owned by Go tasks, handed to a Python agent in between.

    provision (Go, setup) >> analyse (Python AgentOperator) >> collect (Go, teardown)

* ``provision`` (``kind: provision`` in ``bundle.yaml``) creates a Modal
  sandbox owned by this Dag run, stages ``orders.csv`` into it from S3 and
  returns the bare sandbox id as its ``return_value`` XCom. It stamps the tags
  the Python provider reads when it attaches: ``airflow_owner`` (this run),
  ``airflow_expires_at``, ``airflow_network``, ``airflow_workdir``.
* ``analyse`` attaches to that sandbox with
  ``SandboxToolset(ModalSandboxBackend(), attach_to=...)``. It works in the
  sandbox but never destroys it.
* ``collect`` (``kind: collect``) runs whatever happened to ``analyse``: it
  exports ``report.md`` to S3 under the run's own key (``{run_id}`` in the
  bundle config's URL) and destroys the sandbox, even when the export fails.
  It reads the sandbox id from ``provision``'s XCom itself (``inputs:
  {sandbox: {xcom: provision}}`` in ``bundle.yaml``): Airflow 3.3 drops the
  ``collect(sandbox=handle)`` argument, 3.4 passes it.

``provision`` is the setup task and ``collect`` its teardown, so the run's
state is the agent's: a failed ``analyse`` fails the run, and ``collect``
still destroys the sandbox. Airflow runs a teardown once everything before it
is done, if its setup succeeded (trigger rule ``all_done_setup_success``): a
``provision`` that failed has destroyed any sandbox it made, and one killed
with its worker leaves it to the maintenance Dag (``examples/maintenance``).
``collect``'s own failure (no ``report.md`` to export) shows on ``collect``
but does not fail the run.

Both sides must reach the same Modal workspace: the Go tasks use the
``modal_default`` connection and so does the agent's backend. The Go tasks
read and write S3 through ``aws_default``. The sandbox
lifetime (2 h, set in ``bundle.yaml``) covers provision, the agent run and
collect.
"""

from __future__ import annotations

from airflow.providers.common.ai.operators.agent import AgentOperator
from airflow.providers.common.ai.sandbox import ModalSandboxBackend
from airflow.providers.common.ai.toolsets.sandbox import SandboxToolset
from airflow.sdk import dag, task


@task.stub(queue="golang")
def provision(): ...


# A teardown (below): Airflow sets its trigger rule, all_done_setup_success.
@task.stub(queue="golang")
def collect(sandbox: str): ...


@dag(dag_id="sandbox_agent_handoff", schedule=None, tags=["sandbox", "agent", "go"])
def sandbox_agent_handoff():
    handle = provision()
    analyse = AgentOperator(
        task_id="analyse",
        llm_conn_id="llm_default",
        prompt=(
            "orders.csv in your working directory lists this month's orders. "
            "Find the three largest customers and write your findings to report.md."
        ),
        toolsets=[
            SandboxToolset(
                ModalSandboxBackend(modal_conn_id="modal_default"),
                attach_to="{{ ti.xcom_pull(task_ids='provision') }}",
            )
        ],
    )
    handle >> analyse >> collect(sandbox=handle).as_teardown(setups=handle)


sandbox_agent_handoff()
