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


def task_facts(t):
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
    for path in paths:
        bag = DagBag(dag_folder=path)
        facts["import_errors"].update({str(k): str(v) for k, v in bag.import_errors.items()})
        for dag in bag.dags.values():
            facts["dags"].append(
                {
                    "dag_id": dag.dag_id,
                    "fileloc": dag.fileloc,
                    "tasks": [task_facts(t) for t in dag.tasks],
                }
            )
    with open(out, "w") as f:
        json.dump(facts, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
