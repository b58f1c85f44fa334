"""The Python half of a handoff, run by the real provider as an Airflow task runs it.

    python agent.py agent  --handle ID --dag D --run R --task T [--pause]
    python agent.py refuse --handle ID --dag D --run R --task T
    python agent.py create --specs '[{"owner": "D/R", "timeout": 3600, "tags": {}}, ...]'

``agent`` is the ``analyse`` task of examples/agent_handoff: the real
``AgentOperator`` (apache-airflow-providers-common-ai 1.0.0) executes with
``toolsets=[SandboxToolset(ModalSandboxBackend(), attach_to="{{ ti.xcom_pull(...) }}")]``,
its ``attach_to`` rendered by the operator from the handle, inside a task
context for the given Dag run. Only the model is replaced: a pydantic-ai
``FunctionModel`` calls the four tools (run_command, write_file, read_file,
list_directory) in a fixed order, then answers. The toolset attaches on
entry (owner ``<dag>/<run>``, holder ``<dag>/<run>/<task>``) and releases on
exit. With ``--pause`` it stops once attached, prints an ``attached`` event
and waits for a line on stdin before it lets the model run, so the Go test
can act while a Python holder holds the sandbox.

``refuse`` tries to attach in ways the provider must refuse and reports each
refusal. ``create`` provisions a sandbox with ``ModalSandboxBackend.create``
the way the provider's example ``provision`` task does, for Go's sweep to find.

Every line on stdout is one JSON event; the last one is the result. The
Modal client is pointed at the fake by MODAL_SERVER_URL, and the ``modal``
connection comes from AIRFLOW_CONN_MODAL_DEFAULT.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any

# Written as the model's report; the Go test compares the exported bytes.
REPORT = "# Top customers\n\n1. umbrella (3 orders)\n2. initech (2 orders)\n\nWritten by the Python agent.\n"
# The model reads stdin for its first command's output, then checks egress
# and the working directory, as an agent exploring its sandbox would.
FIRST_COMMAND = (
    "pwd; wc -l < orders.csv; "
    "if python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), timeout=3)' 2>/dev/null; "
    "then echo egress=open; else echo egress=blocked; fi"
)


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


class TaskInstance:
    """What AgentOperator and the toolset read from ``context["ti"]``."""

    def __init__(self, dag_id: str, run_id: str, task_id: str) -> None:
        self.dag_id, self.run_id, self.task_id = dag_id, run_id, task_id
        self.map_index = -1
        self.try_number = 1
        self.id = uuid.uuid4()
        self.xcoms: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value

    def xcom_pull(self, task_ids: str | None = None, key: str = "return_value", **_: Any) -> Any:
        return self.xcoms.get(f"{task_ids}:{key}")


def task_context(dag_id: str, run_id: str, task_id: str, handle: str | None = None) -> dict[str, Any]:
    ti = TaskInstance(dag_id, run_id, task_id)
    if handle is not None:
        # What the provision task pushed: the bare id as its return_value.
        ti.xcoms["provision:return_value"] = handle
    return {"ti": ti, "task_instance": ti, "dag_id": dag_id, "run_id": run_id}


def recording_backend():
    """ModalSandboxBackend, unchanged, but remembering what attach returned."""
    from airflow.providers.common.ai.sandbox.modal import ModalSandboxBackend

    class Recording(ModalSandboxBackend):
        attached: Any = None

        def attach(self, sandbox, *, owner, holder):
            result = super().attach(sandbox, owner=owner, holder=holder)
            Recording.attached = {"owner": owner, "holder": holder, "result": result}
            return result

    return Recording


def scripted_model(steps: list[tuple[str, dict]], seen: dict, before_first=None):
    """A model that calls the given tools in order, then answers.

    ``before_first`` runs once, before the first step: by then every toolset
    of the run has entered, so an attached sandbox is claimed.
    """
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def respond(messages, info: AgentInfo) -> ModelResponse:
        if before_first is not None and not seen.get("started"):
            before_first()
        seen["started"] = True
        seen["tools"] = {t.name: t.description for t in info.function_tools}
        returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        seen["returns"] = [str(p.content) for p in returns]
        if len(returns) < len(steps):
            name, args = steps[len(returns)]
            return ModelResponse(parts=[ToolCallPart(tool_name=name, args=args)])
        return ModelResponse(parts=[TextPart(content="report.md is written.")])

    return FunctionModel(respond)


def run_agent(args: argparse.Namespace) -> None:
    from airflow.providers.common.ai.hooks.pydantic_ai import PydanticAIHook
    from airflow.providers.common.ai.operators.agent import AgentOperator
    from airflow.providers.common.ai.toolsets.sandbox import SandboxToolset
    from airflow.sdk.execution_time.context import set_current_context

    backend_cls = recording_backend()
    steps = [
        ("run_command", {"command": FIRST_COMMAND}),
        ("write_file", {"path": "report.md", "content": REPORT}),
        ("read_file", {"path": "report.md"}),
        ("list_directory", {"path": "."}),
    ]
    seen: dict = {}

    def pause() -> None:
        emit("attached", **attached_view(backend_cls.attached))
        sys.stdin.readline()

    model = scripted_model(steps, seen, before_first=pause if args.pause else None)

    class ScriptedHook(PydanticAIHook):
        """The LLM connection's hook, with the scripted model in place of a provider's."""

        def get_conn(self):
            return model

    op = AgentOperator(
        task_id=args.task,
        llm_conn_id="llm_default",
        prompt="orders.csv lists this month's orders. Write the three largest customers to report.md.",
        toolsets=[
            SandboxToolset(
                backend_cls(modal_conn_id="modal_default"),
                attach_to="{{ ti.xcom_pull(task_ids='provision') }}",
            )
        ],
    )
    op.llm_hook = ScriptedHook(llm_conn_id="llm_default")
    context = task_context(args.dag, args.run, args.task, handle=args.handle)

    with set_current_context(context):
        op.render_template_fields(context)
        rendered = op.toolsets[0]
        try:
            output = op.execute(context)
        except Exception as e:  # the task would fail with this
            emit("done", ok=False, error=type(e).__name__, message=str(e), returns=seen.get("returns", []),
                 attach_to=rendered.attach_to)
            return
    emit(
        "done",
        ok=True,
        output=output,
        attach_to=rendered.attach_to,
        attached=attached_view(backend_cls.attached),
        run_command_description=seen["tools"]["run_command"],
        returns=seen["returns"],
    )


def attached_view(attached: dict | None) -> dict:
    if attached is None:
        return {}
    result = attached["result"]
    network = result.network
    return {
        "owner": attached["owner"],
        "holder": attached["holder"],
        "workdir": result.workdir,
        "remaining_lifetime": result.remaining_lifetime,
        "network": None
        if network is None
        else {
            "block_network": network.block_network,
            "allow_egress_to": list(network.allow_egress_to or []),
            "allow_egress_to_cidrs": list(network.allow_egress_to_cidrs or []),
        },
    }


def refuse(args: argparse.Namespace) -> None:
    """Attach the ways the provider must refuse, and report how each ended."""
    import asyncio

    from airflow.providers.common.ai.sandbox.modal import ModalSandboxBackend
    from airflow.providers.common.ai.toolsets.sandbox import SandboxToolset
    from airflow.sdk.execution_time.context import set_current_context

    async def try_attach(handle: str, dag: str, run: str, task: str) -> dict:
        try:
            toolset = SandboxToolset(ModalSandboxBackend(modal_conn_id="modal_default"), attach_to=handle)
        except ValueError as e:  # refused at construction, as at Dag parse time
            return {"refused": True, "error": type(e).__name__, "message": str(e)}
        with set_current_context(task_context(dag, run, task)):
            try:
                async with toolset:
                    return {"refused": False}
            except Exception as e:
                return {"refused": True, "error": type(e).__name__, "message": str(e)}

    cases = {
        # The handle of a sandbox another Dag run owns (a wrong XCom).
        "wrong_owner": (args.handle, args.dag, "manual__someone-else", args.task),
        # The right run, while another holder holds it.
        "held": (args.handle, args.dag, args.run, args.task),
        # Handles of other backends: a local sandbox name, an OpenSandbox id.
        "local_handle": ("airflow-sandbox-0123456789ab", args.dag, args.run, args.task),
        "opensandbox_handle": ("3f0c3a3e-5a36-4b8e-9d5c-2f1a6f1f0b8d", args.dag, args.run, args.task),
        # Malformed: not an id Modal could have minted; an unrendered XCom.
        "malformed": ("sb-not a sandbox", args.dag, args.run, args.task),
        "none": ("None", args.dag, args.run, args.task),
        "empty": ("", args.dag, args.run, args.task),
    }
    results = {name: asyncio.run(try_attach(*case)) for name, case in cases.items()}
    emit("done", ok=True, results=results)


def create(args: argparse.Namespace) -> None:
    """Provision as the provider's example ``provision`` task does, once per spec.

    A spec without an owner is what a SandboxToolset provisions for its own run.
    """
    from airflow.providers.common.ai.sandbox import SandboxSpec
    from airflow.providers.common.ai.sandbox.modal import ModalSandboxBackend

    made = []
    for spec in json.loads(args.specs):
        backend = ModalSandboxBackend(
            modal_conn_id="modal_default", sandbox_timeout=spec.get("timeout", 3600), tags=spec.get("tags")
        )
        handle = backend.create(spec=SandboxSpec(block_network=True, owner=spec.get("owner")))
        made.append({"handle": handle, "tags": backend.read_tags(handle)})
    emit("done", ok=True, sandboxes=made)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["agent", "refuse", "create"])
    parser.add_argument("--handle")
    parser.add_argument("--dag")
    parser.add_argument("--run", default="")
    parser.add_argument("--task", default="analyse")
    parser.add_argument("--pause", action="store_true")
    parser.add_argument("--specs", default="[]")
    args = parser.parse_args()
    {"agent": run_agent, "refuse": refuse, "create": create}[args.mode](args)


if __name__ == "__main__":
    main()
