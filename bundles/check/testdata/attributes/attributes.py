"""Stubs whose attributes, call arguments, params and branches the Go side
(testdata/attrbundle) matches or misses, one mistake per task, next to ones
it gets right: check's attribute findings."""

from __future__ import annotations

from datetime import timedelta

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import Asset, Param, dag, task, task_group
from airflow.sdk.bases.notifier import BaseNotifier


@task.stub(queue="golang")
def go(): ...


@dag(dag_id="at_timeout", schedule=None)
def at_timeout():
    go.override(task_id="timeout_stub_only", execution_timeout=timedelta(seconds=20))()
    go.override(task_id="timeout_go_only")()
    go.override(task_id="timeout_differs", execution_timeout=timedelta(seconds=30))()
    go.override(task_id="timeout_same", execution_timeout=timedelta(seconds=90))()


at_timeout()


def page_someone(context): ...


class PageNotifier(BaseNotifier):
    def notify(self, context): ...


@dag(dag_id="at_runner", schedule=None)
def at_runner():
    go.override(task_id="cb_function", on_failure_callback=page_someone)()
    go.override(task_id="cb_notifier", on_success_callback=PageNotifier())()
    go.override(task_id="emails", email="ops@example.com")()
    go.override(task_id="emails_off", email="ops@example.com", email_on_failure=False, email_on_retry=False)()
    go.override(task_id="hooks", pre_execute=page_someone, post_execute=page_someone)()
    go.override(task_id="run_as", run_as_user="nobody")()
    go.override(task_id="named_map", map_index_template="{{ task.task_id }}")()


at_runner()


@task.stub(queue="golang")
def go_args(sandbox=None, n=None, label=None): ...


@task.stub(queue="golang")
def go_function_default(n=7): ...


@task.stub(queue="golang")
def go_extra(extra=None): ...


@dag(dag_id="at_args", schedule=None)
def at_args():
    up = go.override(task_id="up")()
    go_args.override(task_id="arg_bound")(sandbox=up)
    go_args.override(task_id="arg_keyed")(sandbox=up["id"])
    go_args.override(task_id="arg_literal_same")(n=5)
    go_args.override(task_id="arg_literal_other")(n=6)
    go_args.override(task_id="arg_template")(label="rates-{{ ds }}")
    go_args.override(task_id="arg_template_same")(label="rates-{{ ds }}")
    go_args.override(task_id="arg_template_macro")(label="{{ macros.ds_add(ds, 1) }}")
    go_args.override(task_id="arg_unbound")(sandbox=up)
    go_args.override(task_id="arg_positional")(up)
    go_function_default.override(task_id="arg_function_default")()
    go_extra.override(task_id="arg_no_input")(extra=1)


at_args()


@dag(dag_id="at_params", schedule=None, params={"n": 5, "label": "x", "req": Param(type="string")})
def at_params():
    go.override(task_id="p_same")()
    go.override(task_id="p_none")()
    go.override(task_id="p_other")()
    go.override(task_id="p_required")()
    go.override(task_id="p_task_override", params={"n": 6})()


at_params()


@task.stub(queue="golang")
def go_dict() -> dict[str, int]: ...


@task.stub(queue="golang", multiple_outputs=True)
def go_multi(): ...


@dag(dag_id="at_outputs", schedule=None)
def at_outputs():
    go_multi.override(task_id="mo_stub_only")()
    go.override(task_id="mo_go_only")()
    go_multi.override(task_id="mo_same")()
    go_dict.override(task_id="mo_inferred")()
    go.override(task_id="push_off_value", do_xcom_push=False)()
    go.override(task_id="push_off_nothing", do_xcom_push=False)()


at_outputs()


@dag(dag_id="at_branch", schedule=None)
def at_branch():
    def empty(*ids):
        return [EmptyOperator(task_id=i) for i in ids]

    a1, b1, c1 = empty("a1", "b1", "c1")
    go.override(task_id="br_missing")() >> [a1, b1, c1]
    a2, j2 = empty("a2", "j2")
    go.override(task_id="br_join")() >> [a2, j2]
    a2 >> j2
    a3, j3 = empty("a3", "j3")
    go.override(task_id="br_ok")() >> [a3, j3]
    a3 >> j3

    @task_group(group_id="grp")
    def grp():
        g1, g2 = empty("g1", "g2")
        g1 >> g2

    (z4,) = empty("z4")
    go.override(task_id="br_group")() >> [grp(), z4]


at_branch()


@dag(dag_id="at_plain", schedule=None, default_args={"owner": "data"})
def at_plain():
    """What the scheduler applies to any task works for a Go task: none of
    this is a finding."""
    made = go.override(task_id="setup")()
    work = go.override(
        task_id="plain",
        retries=3,
        retry_delay=timedelta(seconds=30),
        retry_exponential_backoff=True,
        max_retry_delay=timedelta(minutes=5),
        pool="default_pool",
        pool_slots=1,
        priority_weight=5,
        weight_rule="absolute",
        max_active_tis_per_dag=2,
        trigger_rule="all_done",
        depends_on_past=True,
        doc_md="Plain Go work.",
        outlets=[Asset(name="plain_out", uri="s3://b/plain")],
        inlets=[Asset(name="plain_in", uri="s3://b/in")],
        email_on_failure=True,
    )()
    mapped = go_args.override(task_id="mapped", retries=2).partial().expand(n=[1, 2])
    made >> mapped >> work >> go.override(task_id="teardown")().as_teardown(setups=made)


at_plain()
