"""Facts for `airflow-go-worker check`, read with Airflow's own code.

Run with the python of the environment Airflow is installed in:

    python dagfacts.py OUT.json PATH [PATH ...]

It parses each PATH (a Dags folder or a Dag file) with Airflow's DagBag, as
the Dag processor does, reads the [sdk] coordinator settings from Airflow's
configuration (airflow.cfg, AIRFLOW__SDK__* variables), and writes what it
found to OUT.json. Exit status 3: Airflow cannot be imported.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os.path
import sys


def coordinators(conf):
    """The [sdk] coordinators and queue routing, as the task runner reads them."""
    routing = {"coordinators": {}, "queue_to_coordinator": {}, "error": ""}
    try:
        specs = conf.getjson("sdk", "coordinators", fallback={}) or {}
        routing["queue_to_coordinator"] = conf.getjson("sdk", "queue_to_coordinator", fallback={}) or {}
    except Exception as exc:  # a malformed JSON value
        routing["error"] = f"{type(exc).__name__}: {exc}"
        return routing
    try:
        from airflow.sdk.coordinators.executable.coordinator import ExecutableCoordinator
    except ImportError:
        ExecutableCoordinator = None
    for name, spec in specs.items():
        entry = {"classpath": "", "executable": False, "executables_root": [], "error": ""}
        routing["coordinators"][name] = entry
        if not isinstance(spec, dict):
            entry["error"] = "the entry is not a JSON object"
            continue
        entry["classpath"] = classpath = str(spec.get("classpath", ""))
        module, _, attr = classpath.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except Exception as exc:
            entry["error"] = f"cannot import {classpath!r}: {exc}"
            continue
        entry["executable"] = bool(
            ExecutableCoordinator is not None and isinstance(cls, type) and issubclass(cls, ExecutableCoordinator)
        )
        roots = (spec.get("kwargs") or {}).get("executables_root")
        if isinstance(roots, str):
            roots = [roots]
        entry["executables_root"] = [os.path.expanduser(str(r)) for r in roots or []]
    return routing


def schema_versions():
    """The supervisor schema versions this Airflow's coordinator accepts."""
    try:
        from airflow.sdk.execution_time.schema.versions import get_bundle

        return [v.value for v in get_bundle().versions]
    except Exception:
        return []


def is_stub(task):
    if getattr(task, "is_stub", False):
        return True
    # A mapped stub: the operator class says it.
    return bool(getattr(getattr(task, "operator_class", None), "is_stub", False))


def asset_profiles(objs):
    """A task's outlets as the task runner reports them (AssetProfile), with
    Airflow's own name and normalised uri."""
    out = []
    for obj in objs or ():
        kind = type(obj).__name__
        if kind in ("Asset", "AssetAlias", "AssetNameRef", "AssetUriRef") or hasattr(obj, "uri") or hasattr(obj, "name"):
            out.append({"type": kind, "name": getattr(obj, "name", None), "uri": getattr(obj, "uri", None)})
    return out


def expansion(task):
    """How a mapped task expands: kind dict (.expand) or list (.expand_kwargs),
    and each argument's source: an upstream's XCom, a literal list, or
    something the bundle cannot read (named by type)."""
    try:
        ei = task._get_specified_expand_input()
    except Exception:
        ei = getattr(task, "expand_input", None)
    if ei is None:
        return None
    value = getattr(ei, "value", None)
    if not isinstance(value, dict):
        return {"kind": "list", "args": {}}
    args = {}
    for name, v in value.items():
        op = getattr(v, "operator", None)
        if type(v).__name__ == "PlainXComArg" and op is not None:
            args[name] = {"xcom": op.task_id, "key": getattr(v, "key", "return_value")}
            continue
        try:
            json.dumps(v)
            args[name] = {"literal": v}
        except TypeError:
            args[name] = {"unsupported": type(v).__name__}
    return {"kind": "dict", "args": args}


def task_attr(task, name, default=None):
    """An attribute of a task, or of a mapped task's partial() arguments
    (where a mapped task keeps do_xcom_push, pre_execute, op_kwargs ...)."""
    partial = getattr(task, "partial_kwargs", None)
    if isinstance(partial, dict) and name in partial:
        return partial[name]
    try:
        return getattr(task, name)
    except AttributeError:
        return default


def describe_callable(obj):
    """A callback or notifier as a Dag author would recognise it."""
    if obj is None:
        return ""
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if name:
        return name
    return ("notifier " if hasattr(obj, "notify") else "") + type(obj).__name__


def has_template(v):
    """Whether a value holds a Jinja template, which Airflow renders in
    op_args/op_kwargs (template fields of a decorated task)."""
    if isinstance(v, str):
        return "{{" in v or "{%" in v or "{#" in v
    if isinstance(v, dict):
        return any(has_template(k) or has_template(x) for k, x in v.items())
    if isinstance(v, (list, tuple, set)):
        return any(has_template(x) for x in v)
    return False


def value_source(v):
    """Where an argument's value comes from: an upstream's XCom, a JSON
    literal (template: Airflow would render it), or a form named by type."""
    try:
        from airflow.sdk.definitions.xcom_arg import XComArg
    except ImportError:
        XComArg = ()
    op = getattr(v, "operator", None)
    if type(v).__name__ == "PlainXComArg" and op is not None:
        return {"xcom": op.task_id, "key": getattr(v, "key", "return_value")}
    if XComArg and isinstance(v, XComArg):
        return {"unsupported": type(v).__name__}
    if XComArg and list(XComArg.iter_xcom_references(v)):
        return {"unsupported": type(v).__name__ + " holding an XComArg"}
    try:
        json.dumps(v, allow_nan=False)
    except (TypeError, ValueError):
        return {"unsupported": type(v).__name__}
    return {"literal": v, "template": has_template(v)}


def call_arguments(task):
    """The stub call's arguments by parameter name (positional ones bound
    to their names as Python binds them), and the stub function's own
    defaults the call leaves in place."""
    op_args = list(task_attr(task, "op_args", None) or [])
    op_kwargs = dict(task_attr(task, "op_kwargs", None) or {})
    positional, args, defaults = [], {}, {}
    try:
        sig = inspect.signature(task_attr(task, "python_callable"))
    except (TypeError, ValueError):
        sig = None
    names = [p.name for p in sig.parameters.values()] if sig else []
    for i, v in enumerate(op_args):
        name = names[i] if i < len(names) else f"#{i + 1}"
        positional.append(name)
        args[name] = value_source(v)
    for name, v in op_kwargs.items():
        args[name] = value_source(v)
    expanded = set()
    if getattr(task, "is_mapped", False):
        ei = expansion(task) or {}
        expanded = set((ei.get("args") or {}).keys())
    for p in sig.parameters.values() if sig else ():
        if p.name in args or p.name in expanded or p.default is inspect.Parameter.empty or p.default is None:
            continue
        src = value_source(p.default)
        if "literal" in src:
            defaults[p.name] = src["literal"]
    return {"args": args, "positional": positional, "function_defaults": defaults}


def merged_params(dag, task):
    """The params a Python task would see, merged as process_params merges
    them (the Dag's, then the task's): each default, or none (required)."""
    from airflow.sdk.definitions.param import ParamsDict

    params = ParamsDict()
    params.update(getattr(dag, "params", None) or {})
    params.update(task_attr(task, "params", None) or {})
    out = {}
    for name in params.keys():
        p = params.get_param(name)
        # A Param() without a default holds Airflow's NOTSET sentinel.
        if not p.has_value or type(p.value).__name__ == "ArgNotSet":
            out[name] = {"required": True}
            continue
        src = value_source(p.value)
        out[name] = {"default": src["literal"]} if "literal" in src else {"unsupported": src["unsupported"]}
    return out


def branch_shape(task):
    """The task's direct downstream tasks (a task group's roots stand for
    it) and, for each, the others it is also downstream of: the joins
    Airflow follows when a branch chooses one of those."""
    down = list(task.downstream_list)
    joins = {}
    for d in down:
        after = sorted(
            o.task_id for o in down if o is not d and d.task_id in o.get_flat_relative_ids(upstream=False)
        )
        if after:
            joins[d.task_id] = after
    return sorted(d.task_id for d in down), joins


CALLBACKS = ("on_execute_callback", "on_success_callback", "on_failure_callback", "on_retry_callback", "on_skipped_callback")


def runner_facts(task, run_as_default):
    """What Airflow's Python task runner applies for a task and hands an
    executable none of: execution_timeout, the XCom push, callbacks,
    e-mail, retry_policy, pre/post_execute, run_as_user, map_index_template."""
    timeout = task_attr(task, "execution_timeout")
    callbacks = {}
    for kind in CALLBACKS:
        value = task_attr(task, kind) or []
        if not isinstance(value, (list, tuple)):
            value = [value]
        if value:
            callbacks[kind] = [describe_callable(c) for c in value]
    email = task_attr(task, "email") or []
    if isinstance(email, str):
        email = [e.strip() for e in email.replace(";", ",").split(",") if e.strip()]
    hooks = {}
    for name, attr in (("pre_execute", "_pre_execute_hook"), ("post_execute", "_post_execute_hook")):
        hook = task_attr(task, name) if getattr(task, "is_mapped", False) else task_attr(task, attr)
        if callable(hook):
            hooks[name] = describe_callable(hook)
    run_as = task_attr(task, "run_as_user") or ""
    return {
        "execution_timeout": timeout.total_seconds() if timeout is not None else None,
        "multiple_outputs": bool(task_attr(task, "multiple_outputs", False)),
        "do_xcom_push": bool(task_attr(task, "do_xcom_push", True)),
        "callbacks": callbacks,
        "email": [str(e) for e in email],
        "email_on_failure": bool(task_attr(task, "email_on_failure", True)),
        "email_on_retry": bool(task_attr(task, "email_on_retry", True)),
        "retry_policy": describe_callable(task_attr(task, "retry_policy")),
        "hooks": hooks,
        "run_as_user": run_as or run_as_default,
        "run_as_user_from_config": not run_as and bool(run_as_default),
        "map_index_template": task_attr(task, "map_index_template") or "",
    }


def stub_facts(dag, task, run_as_default):
    """What check compares with the Go side of a stub, and refuses."""
    facts = runner_facts(task, run_as_default)
    facts.update(call_arguments(task))
    facts["params"] = merged_params(dag, task)
    facts["downstream"], facts["joins"] = branch_shape(task)
    return facts


def task_facts(dag, t, run_as_default=""):
    facts = {
        "task_id": t.task_id,
        "queue": t.queue,
        "stub": is_stub(t),
        "upstream": sorted(t.get_flat_relative_ids(upstream=True)),
        "outlets": asset_profiles(getattr(t, "outlets", None)),
        "expand": expansion(t) if getattr(t, "is_mapped", False) else None,
    }
    try:
        facts["mapped_dependants"] = sorted(d.task_id for d in t.iter_mapped_dependants())
    except Exception:
        facts["mapped_dependants"] = []
    if facts["stub"]:
        try:
            facts["attributes"] = stub_facts(dag, t, run_as_default)
        except Exception as exc:  # a form this script does not know: say so, check the rest
            facts["attributes_error"] = f"{type(exc).__name__}: {exc}"
    return facts


def main(argv):
    out, paths = argv[1], argv[2:]
    try:
        import airflow
        from airflow.configuration import conf
        from airflow.dag_processing.dagbag import DagBag
    except ImportError as exc:
        print(f"cannot import Airflow: {exc}", file=sys.stderr)
        return 3
    facts = {
        "airflow_version": getattr(airflow, "__version__", ""),
        "python": sys.executable,
        "dags": [],
        "import_errors": {},
        "routing": coordinators(conf),
        "schema_versions": schema_versions(),
    }
    # Airflow applies [core] default_impersonation to a task without
    # run_as_user; [core] default_task_execution_timeout is already in
    # each parsed task.
    run_as_default = conf.get("core", "default_impersonation", fallback="") or ""
    try:
        from airflow.sdk.definitions._internal.abstractoperator import (
            DEFAULT_TASK_EXECUTION_TIMEOUT as timeout,
        )
    except ImportError:
        timeout = None
    facts["default_execution_timeout"] = timeout.total_seconds() if timeout else None
    # With it off, a Python task's params ignore the run's conf.
    facts["conf_overrides_params"] = conf.getboolean("core", "dag_run_conf_overrides_params", fallback=True)
    for path in paths:
        bag = DagBag(dag_folder=path)
        facts["import_errors"].update({str(k): str(v) for k, v in bag.import_errors.items()})
        for dag in bag.dags.values():
            facts["dags"].append(
                {
                    "dag_id": dag.dag_id,
                    "fileloc": dag.fileloc,
                    "tasks": [task_facts(dag, t, run_as_default) for t in dag.tasks],
                }
            )
    with open(out, "w") as f:
        json.dump(facts, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
