"""Run task instances through Airflow's own ExecutableCoordinator.

Driven by e2e/realsdk (go test). Everything between the coordinator and
the bundle is Airflow's code from apache-airflow-task-sdk: the bundle
search in executables_root, the subprocess start and its connection
checks, the comm frames, schema handling, request handling and the final
state. Only the Execution API server is a stand-in: the real
airflow.sdk.api.client.Client talks to it through an httpx MockTransport,
and it records every call so the Go test can assert on them.

Usage: run_coordinator.py CASES.json RESULTS.json

CASES.json is a list of cases:
  {"name", "executables_root": [dir, ...], "dag_id", "task_id",
   "run_id", "try_number", "max_tries", "should_retry", "conf",
   "connections": {conn_id: {conn_type, host, login, password, ...}},
   "variables": {key: value}, "xcoms": {"task_id/key": value},
   "asset_events": [AssetEventResponse, ...]  (what GET asset-events/by-asset
       answers, filtered by the asset's name and uri),
   "dag_runs": {"dag_id/run_id": state}  (what GET dag-runs/.../state
       answers; any other run is a 404, as Airflow's Execution API answers),
   "env": {name: value}  (set in this process, so in the bundle's, for the
       case only),
   "sigterm_on_event": "<log event>"  (SIGTERM this supervisor when the
       bundle logs it; the supervisor forwards it to the bundle as Airflow
       does on a worker shutdown),
   "resume_of": "<an earlier case's name>"  (that case deferred: fire its
       trigger, merge the event into its next_kwargs as Airflow's
       handle_event_submit does, and run the same task instance again with
       them in its TIRunContext),
   "timeout": seconds}
RESULTS.json gets one result per case; see run_case. A case records the
state update the supervisor sent (state_update: validated as the Execution
API's route validates it) and, when it resumed, the next_method and
next_kwargs it was resumed with (resumed_with). Each says how long
the coordinator took (seconds: execute_task, fork to final state) and how
often its supervisor waited with nothing left to read (idle_waits).
"""

from __future__ import annotations

import enum
import json
import logging
import os
import signal
import sys
import time
import traceback
import uuid
from datetime import datetime, timedelta, timezone

import asyncio
import types

import httpx
import pydantic
import structlog

def _plain(v):
    """JSON for what the supervisor puts on the wire: enums by value, as
    msgspec encodes them; anything else by its string."""
    if isinstance(v, enum.Enum):
        return v.value
    return str(v)


# Everything logged while a case runs: the supervisor's own records and the
# bundle's, which the supervisor re-emits.
LOG: list[dict] = []


def _record(_logger, method, event_dict):
    rec = {k: v for k, v in event_dict.items() if not k.startswith("__")}
    rec.setdefault("level", method)
    LOG.append(json.loads(json.dumps(rec, default=_plain)))
    raise structlog.DropEvent


def _capture_logs(*processors):
    # Airflow configures structlog when it is imported; take it over after.
    structlog.configure(
        processors=[*processors, _record],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        cache_logger_on_first_use=False,
    )


from airflow.api_fastapi.execution_api.datamodels import taskinstance as ti_models  # noqa: E402
from airflow.sdk.api.client import Client  # noqa: E402
from airflow.sdk.api.datamodels._generated import (  # noqa: E402
    BundleInfo,
    ConnectionResponse,
    DagRun,
    DagRunStateResponse,
    TaskInstance,
    TIRunContext,
    VariableResponse,
    XComResponse,
)
from airflow.sdk.coordinators.executable import ExecutableCoordinator  # noqa: E402
from airflow.sdk.execution_time import schema as schema_mod  # noqa: E402
from airflow.sdk.execution_time import supervisor as supervisor_mod  # noqa: E402

# The installed task SDK's own schema snapshot: what its supervisor schema
# version (2026-06-16 in 1.3.x) defines, per message type.
with open(os.path.join(os.path.dirname(schema_mod.__file__), "schema.json")) as f:
    SCHEMA = json.load(f)


def schema_violations(bodies: list[dict]) -> list[str]:
    """Name every key of a request body that its type does not define, and
    every type the schema does not know: Airflow drops or rejects them."""
    out = []
    defs = SCHEMA["$defs"]
    for body in bodies:
        typ = body.get("type")
        if typ not in defs:
            out.append(f"unknown message type {typ!r}")
            continue
        extra = sorted(set(body) - set(defs[typ].get("properties", {})))
        if extra:
            out.append(f"{typ} has fields {extra} that schema {SCHEMA['api_version']} does not define")
    return out

# Observe (never change) what crosses the comm socket: the raw request
# bodies the bundle sends, before Airflow validates them, and the bodies
# Airflow sends back, after its schema downgrade.
REQUESTS: list[dict] = []
REPLIES: list[dict] = []
_orig_deserialize = supervisor_mod.WatchedSubprocess._deserialize_request
_orig_serialize = supervisor_mod.WatchedSubprocess._serialize_response


def _observe_request(self, body):
    REQUESTS.append(json.loads(json.dumps(body, default=_plain)))
    return _orig_deserialize(self, body)


def _observe_reply(self, msg, **dump_opts):
    out = _orig_serialize(self, msg, **dump_opts)
    REPLIES.append(json.loads(json.dumps(out, default=_plain)))
    return out


supervisor_mod.WatchedSubprocess._deserialize_request = _observe_request
supervisor_mod.WatchedSubprocess._serialize_response = _observe_reply

# Observe the supervisor's wait loop: a turn that starts with every socket
# at EOF while the process has not been seen to exit selects on nothing
# and sleeps its whole wait (min_heartbeat_interval, 5 s) before it polls
# for the exit again. That is the idle wait a task process must never
# cause (see bundles/internal/exitorder).
IDLE_WAITS = [0]
_orig_service = supervisor_mod.WatchedSubprocess._service_subprocess


def _observe_service(self, max_wait_time, *args, **kwargs):
    if self._exit_code is None and not self._open_sockets:
        IDLE_WAITS[0] += 1
    return _orig_service(self, max_wait_time, *args, **kwargs)


supervisor_mod.WatchedSubprocess._service_subprocess = _observe_service


# The body models of PATCH task-instances/{id}/state by the tag its
# discriminator gives (TIStateUpdate, the route's body type).
STATE_PAYLOADS = {
    "_terminal_": ti_models.TITerminalStatePayload,
    "success": ti_models.TISuccessStatePayload,
    "_other_": ti_models.TITargetStatePayload,
    "deferred": ti_models.TIDeferredStatePayload,
    "up_for_reschedule": ti_models.TIRescheduleStatePayload,
    "awaiting_input": ti_models.TIAwaitingInputStatePayload,
    "up_for_retry": ti_models.TIRetryStatePayload,
}


class ExecutionAPI:
    """A strict stand-in for Airflow's Execution API server: it serves what
    the case defines and records every call; an unexpected call is an error.

    resumed is the deferred task instance's row when the case resumes one:
    its first start_date, next_method and next_kwargs (the event merged)."""

    def __init__(self, case: dict, ti: TaskInstance, resumed: dict | None = None):
        self.case = case
        self.ti = ti
        self.calls: list[dict] = []
        self.xcoms = dict(case.get("xcoms") or {})
        self.child_pid = None
        self.rendered_fields = None
        self.resumed = resumed
        # A resumed task instance is queued again, like a new one.
        self.state = "queued"
        self.start_date = resumed["start_date"] if resumed else None
        self.state_update = None

    def update_state(self, call: dict, body) -> httpx.Response:
        """PATCH task-instances/{id}/state as ti_update_state serves it: the
        body validated by the model its state selects (422); a deferral, or
        any update after one, as the route's state rules answer it: a repeat
        of the current state 200, any other change only from running (409).
        (The route also refuses a second terminal state, as for a task that
        succeeded and then exited non-zero; the stand-in accepts it, so the
        tests see what the supervisor sends.)"""
        tag = ti_models.ti_state_discriminator(body if isinstance(body, dict) else {})
        try:
            payload = STATE_PAYLOADS[tag].model_validate(body)
        except pydantic.ValidationError as e:
            call["unexpected"] = True
            return httpx.Response(422, json={"detail": json.loads(e.json())})
        state = payload.state.value
        ruled = "deferred" in (state, self.state)
        if ruled and state == self.state:
            return httpx.Response(200)
        if ruled and self.state != "running":
            call["unexpected"] = True
            return httpx.Response(409, json={"detail": {"reason": "invalid_state", "previous_state": self.state}})
        self.state = state
        self.state_update = payload.model_dump(mode="json")
        return httpx.Response(204)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/execution/")
        parts = path.split("/")
        body = json.loads(request.content) if request.content else None
        call = {"method": request.method, "path": path, "body": body, "params": dict(request.url.params)}
        self.calls.append(call)
        ti_id = str(self.ti.id)
        if parts[:1] == ["task-instances"] and parts[1:2] == [ti_id]:
            what = parts[2] if len(parts) > 2 else ""
            if request.method == "PATCH" and what == "run":
                self.child_pid = body.get("pid")
                self.state = "running"
                # A resume keeps the first start (ti_run drops the new one).
                self.start_date = self.start_date or body.get("start_date")
                return httpx.Response(200, content=self.run_context().model_dump_json())
            if request.method == "PUT" and what == "heartbeat":
                return httpx.Response(204)
            if request.method == "PATCH" and what == "state":
                return self.update_state(call, body)
            # Every task sends its rendered fields once it starts, as
            # Python's task runner does; the real route (ti_put_rtif)
            # takes a JSON object and answers 201.
            if request.method == "PUT" and what == "rtif":
                if not isinstance(body, dict):
                    call["unexpected"] = True
                    return httpx.Response(422, json={"detail": "rendered fields must be a JSON object"})
                self.rendered_fields = body
                return httpx.Response(201, json={"message": "Rendered task instance fields successfully set"})
            if request.method == "PATCH" and what == "skip-downstream":
                if not isinstance(body, dict) or not isinstance(body.get("tasks"), list):
                    call["unexpected"] = True
                    return httpx.Response(422, json={"detail": "tasks must be a list"})
                return httpx.Response(204)
            if request.method == "PATCH" and what == "rendered-map-index":
                if not isinstance(body, str):
                    call["unexpected"] = True
                    return httpx.Response(422, json={"detail": "rendered_map_index must be a string"})
                return httpx.Response(204)
        if request.method == "GET" and parts[0] == "connections" and len(parts) == 2:
            conn = (self.case.get("connections") or {}).get(parts[1])
            if conn is None:
                return httpx.Response(404, json={"detail": {"reason": "not_found"}})
            full = {"conn_id": parts[1], "host": None, "schema": None, "login": None, "password": None, "port": None, "extra": None, **conn}
            return httpx.Response(200, content=ConnectionResponse.model_validate(full).model_dump_json(by_alias=True))
        if request.method == "GET" and parts[0] == "variables" and len(parts) == 2:
            variables = self.case.get("variables") or {}
            if parts[1] not in variables:
                return httpx.Response(404, json={"detail": {"reason": "not_found"}})
            return httpx.Response(200, content=VariableResponse(key=parts[1], value=variables[parts[1]]).model_dump_json())
        if request.method == "GET" and parts[0] == "dag-runs" and len(parts) == 4 and parts[3] == "state":
            state = (self.case.get("dag_runs") or {}).get(f"{parts[1]}/{parts[2]}")
            if state is None:
                return httpx.Response(404, json={"detail": {"reason": "not_found", "message": f"Dag run with dag_id '{parts[1]}' and run_id '{parts[2]}' was not found"}})
            return httpx.Response(200, content=DagRunStateResponse(state=state).model_dump_json())
        if request.method == "GET" and path == "asset-events/by-asset":
            return self.asset_events(request.url.params)
        if parts[0] == "xcoms" and len(parts) == 5:
            _, dag_id, run_id, task_id, key = parts
            if dag_id == self.ti.dag_id and run_id == self.ti.run_id:
                if request.method == "GET":
                    if f"{task_id}/{key}" not in self.xcoms:
                        return httpx.Response(404, json={"detail": {"reason": "not_found"}})
                    return httpx.Response(200, content=XComResponse(key=key, value=self.xcoms[f"{task_id}/{key}"]).model_dump_json())
                if request.method == "POST":
                    self.xcoms[f"{task_id}/{key}"] = body
                    return httpx.Response(201, json={"ok": True})
        call["unexpected"] = True
        return httpx.Response(400, json={"detail": f"the stand-in Execution API does not serve {request.method} {path}"})

    def asset_events(self, params) -> httpx.Response:
        """The case's asset_events of the asset named by name and/or uri,
        ordered by timestamp as the real route orders them, limited."""
        name, uri = params.get("name"), params.get("uri")
        events = [
            e for e in (self.case.get("asset_events") or [])
            if (not name or e["asset"]["name"] == name) and (not uri or e["asset"]["uri"] == uri)
        ]
        events.sort(key=lambda e: e["timestamp"], reverse=params.get("ascending") == "false")
        if params.get("limit"):
            events = events[: int(params["limit"])]
        return httpx.Response(200, json={"asset_events": events})

    def run_context(self) -> TIRunContext:
        now = datetime.now(timezone.utc)
        case = self.case
        return TIRunContext(
            dag_run=DagRun(
                dag_id=self.ti.dag_id, run_id=self.ti.run_id, logical_date=now, data_interval_start=now,
                data_interval_end=now, run_after=now, start_date=now, end_date=None, clear_number=0,
                run_type="manual", state="running", conf=case.get("conf") or {}, consumed_asset_events=[],
                partition_key=None,
            ),
            max_tries=case.get("max_tries", 0),
            should_retry=case.get("should_retry", False),
            # ti_run sets these only for a task instance with a next_method.
            next_method=self.resumed["next_method"] if self.resumed else None,
            next_kwargs=self.resumed["next_kwargs"] if self.resumed else None,
            start_date=self.start_date if self.resumed else None,
        )


def fire_trigger(deferred: dict, timeout: float) -> dict:
    """What Airflow does between a DeferTask and the resume, by its own
    code: the trigger row's kwargs read as the triggerer reads them, the
    trigger class built and run until its first event, and the event
    merged into next_kwargs by handle_event_submit. Returns the resumed
    row's next_method and next_kwargs."""
    from airflow.models.trigger import Trigger, handle_event_submit
    from airflow._shared.module_loading import import_string

    kwargs = deferred["trigger_kwargs"]
    kwargs = Trigger._decrypt_kwargs(kwargs if isinstance(kwargs, str) else json.dumps(kwargs))
    trigger = import_string(deferred["classpath"])(**kwargs)

    async def first_event():
        async for event in trigger.run():
            return event
        raise RuntimeError("the trigger ended without an event")

    event = asyncio.run(asyncio.wait_for(first_event(), timeout))
    row = types.SimpleNamespace(next_method=deferred["next_method"], next_kwargs=deferred["next_kwargs"], state="deferred")
    handle_event_submit(event, task_instance=row, session=types.SimpleNamespace(flush=lambda: None))
    if row.state != "scheduled":
        raise RuntimeError(f"handle_event_submit left the task instance {row.state}, not scheduled")
    return {"next_method": row.next_method, "next_kwargs": row.next_kwargs}


def run_case(case: dict, earlier: dict[str, tuple[TaskInstance, "ExecutionAPI"]]) -> dict:
    _capture_logs()
    LOG.clear()
    REQUESTS.clear()
    REPLIES.clear()
    IDLE_WAITS[0] = 0
    resumed = None
    if case.get("resume_of"):
        # The same task instance (id, try) as the case that deferred,
        # queued again once its trigger fired.
        ti, before = earlier.get(case["resume_of"], (None, None))
        if before is None or before.state != "deferred":
            return {"name": case.get("name", ""), "error_type": "NotDeferred",
                    "error": f"case {case['resume_of']!r} did not defer: nothing to resume"}
        try:
            resumed = {"start_date": before.start_date, **fire_trigger(before.state_update, case.get("timeout") or 600)}
        except Exception as e:
            return {"name": case.get("name", ""), "error_type": type(e).__name__, "error": str(e), "traceback": traceback.format_exc()}
    else:
        ti = TaskInstance(
            id=uuid.uuid4(), task_id=case["task_id"], dag_id=case["dag_id"],
            run_id=case.get("run_id", "manual__2026-12-01T00:00:00+00:00"), try_number=case.get("try_number", 1),
            dag_version_id=uuid.uuid4(), map_index=-1, queue="golang",
        )
    api = ExecutionAPI(case, ti, resumed)
    earlier[case.get("name", "")] = (ti, api)
    client = Client(base_url="http://execution-api.test/execution/", token="stand-in", transport=httpx.MockTransport(api))
    # Airflow's default task_startup_timeout is 10 s; a machine loaded to
    # ten times its cores took longer than that to start a bundle, and
    # these tests are about what the bundle does once it has connected.
    coordinator = ExecutableCoordinator(executables_root=case["executables_root"], task_startup_timeout=case.get("startup_timeout", 120.0))

    sigterm_on = case.get("sigterm_on_event")
    sent = {"sigterm": False}
    if sigterm_on:
        # Like a worker being shut down: SIGTERM reaches the supervisor,
        # whose own handler forwards it to the task process.
        def on_event(_logger, method, event_dict):
            if not sent["sigterm"] and event_dict.get("event") == sigterm_on:
                sent["sigterm"] = True
                os.kill(os.getpid(), signal.SIGTERM)
            return event_dict

        _capture_logs(on_event)

    def on_alarm(signum, frame):
        raise TimeoutError(f"the task did not finish within {case.get('timeout')} s")

    saved_env = {k: os.environ.get(k) for k in (case.get("env") or {})}
    os.environ.update(case.get("env") or {})
    signal.signal(signal.SIGALRM, on_alarm)
    # The Go side gives each case what is left of its test's time; no
    # timeout (a benchmark) means no alarm.
    signal.alarm(int(case.get("timeout") or 0))
    result = {"name": case.get("name", ""), "ti_id": str(ti.id)}
    started = time.monotonic()
    try:
        res = coordinator.execute_task(
            what=ti, dag_rel_path="dags/stub_dag.py", bundle_info=BundleInfo(name="dags-folder", version=None),
            client=client, subprocess_logs_to_stdout=False,
        )
        result["exit_code"] = int(res.exit_code) if res.exit_code is not None else None
        result["final_state"] = str(res.final_state.value if hasattr(res.final_state, "value") else res.final_state)
    except BaseException as e:  # the coordinator's own refusal is a result too
        if api.child_pid:
            try:
                os.kill(api.child_pid, signal.SIGKILL)
            except OSError:
                pass
        result["error_type"] = type(e).__name__
        result["error"] = str(e)
        result["traceback"] = traceback.format_exc()
    finally:
        signal.alarm(0)
        result["seconds"] = time.monotonic() - started
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    result["idle_waits"] = IDLE_WAITS[0]
    result["sigterm_sent"] = sent["sigterm"]
    result["api_calls"] = api.calls
    result["state_update"] = api.state_update
    timeout = (api.state_update or {}).get("trigger_timeout")
    result["trigger_timeout_seconds"] = pydantic.TypeAdapter(timedelta).validate_python(timeout).total_seconds() if timeout else None
    result["resumed_with"] = {k: resumed[k] for k in ("next_method", "next_kwargs")} if resumed else None
    result["xcoms"] = api.xcoms
    result["requests"] = list(REQUESTS)
    result["schema_version"] = SCHEMA["api_version"]
    result["schema_violations"] = schema_violations(REQUESTS)
    result["replies"] = list(REPLIES)
    result["logs"] = list(LOG)
    return result


def main() -> int:
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    earlier: dict = {}
    results = [run_case(c, earlier) for c in cases]
    with open(sys.argv[2], "w") as f:
        json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
