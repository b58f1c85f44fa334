"""
The stub Dag of the deployment self-test every standard bundle carries
(``airflow_go_worker_selftest``, registered by ``bundles/selftest``): a
bundle packed without a config has it, one packed with a config has it when
the config sets ``selftest: true``.

    ping >> xcom_roundtrip >> variable

* ``ping``: the bundle starts under Airflow's coordinator; returns the
  bundle's version, its Go version, the supervisor schema it speaks and the
  host name of the worker it ran on.
* ``xcom_roundtrip``: an XCom written through Airflow reads back.
* ``variable``: the variable ``airflow_go_worker_selftest`` resolves through
  Airflow; returns whether it exists and its length, never its value (a
  missing variable is an answer too: the task succeeds).

Triggered without a conf, every task succeeds. To check a connection too,
add a stub ``connection`` task and trigger with ``{"conn_id": "<id>"}``:
without a ``conn_id`` it fails. The bundle's ``fail`` (always fails) and
``sleep`` (cancellation) tasks are left out on purpose; add their stubs to
try a failure or stopping a running task.

Copy this file into the Dags folder; the bundle goes into the coordinator's
``executables_root`` (README, "Your first Go task").
"""

from __future__ import annotations

from airflow.sdk import dag, task


@task.stub(queue="golang")
def ping(): ...


@task.stub(queue="golang")
def xcom_roundtrip(): ...


@task.stub(queue="golang")
def variable(): ...


@dag(dag_id="airflow_go_worker_selftest", schedule=None, tags=["go", "selftest"])
def airflow_go_worker_selftest():
    ping() >> xcom_roundtrip() >> variable()


airflow_go_worker_selftest()
