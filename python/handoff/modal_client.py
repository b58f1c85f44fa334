"""Drive Modal's real Python client against a sandbox, and report what it saw.

Used by testing/fakemodal's Python tests: the Go side creates a sandbox (V1 or
V2 id), this script reaches it the way the common.ai provider does, through
``modal.Sandbox.from_id``, and prints one JSON object on stdout.

    python modal_client.py check SANDBOX_ID      # every call a handoff makes
    python modal_client.py poll SANDBOX_ID       # from_id + poll only
    python modal_client.py create APP NAME       # Sandbox.create, prints the id
    python modal_client.py unserved SANDBOX_ID   # an RPC the fake does not serve

The environment points the client at the fake (MODAL_SERVER_URL,
MODAL_TOKEN_ID, MODAL_TOKEN_SECRET, MODAL_CONFIG_PATH).
"""

from __future__ import annotations

import json
import sys

import modal


def check(sandbox_id: str) -> dict:
    sb = modal.Sandbox.from_id(sandbox_id)
    out: dict = {"object_id": sb.object_id, "poll": sb.poll()}

    tags = sb.get_tags()
    out["tags_before"] = tags
    # set_tags replaces the whole set, as the provider's attach relies on.
    sb.set_tags({**tags, "checked_by": "modal_client.py"})
    out["tags_after"] = sb.get_tags()
    out["listed"] = [s.object_id for s in modal.Sandbox.list(tags={"checked_by": "modal_client.py"})]

    # What ModalSandboxBackend.run_command does: sh -c, bytes, a deadline.
    p = sb.exec("sh", "-c", "echo out; echo err >&2; pwd; exit 3", timeout=30, text=False)
    out["exec"] = {"stdout": p.stdout.read().decode(), "stderr": p.stderr.read().decode(), "code": p.wait()}

    # stdin, and poll() (TaskExecPoll) of a command that waits for its EOF.
    p = sb.exec("cat", text=True)
    p.stdin.write("through stdin")
    p.stdin.drain()
    running = p.poll()
    p.stdin.write_eof()
    p.stdin.drain()
    cat_out = p.stdout.read()
    out["stdin"] = {"stdout": cat_out, "poll_running": running, "code": p.wait()}

    # A command past its deadline.
    p = sb.exec("sleep", "30", timeout=1)
    out["timeout_code"] = p.wait()

    fs = sb.filesystem
    fs.write_bytes(b"\x00\x01binary\xff", "/workspace/py/data.bin")
    out["read_bytes"] = list(fs.read_bytes("/workspace/py/data.bin"))
    fs.make_directory("/workspace/py/sub")
    out["list_files"] = sorted(
        [e.name, e.is_dir(), e.size] for e in fs.list_files("/workspace/py")
    )
    st = fs.stat("/workspace/py/data.bin")
    out["stat"] = {"name": st.name, "type": st.type.value, "size": st.size}
    fs.remove("/workspace/py", recursive=True)
    try:
        fs.stat("/workspace/py")
        out["stat_removed"] = "exists"
    except modal.exception.SandboxFilesystemNotFoundError as e:
        out["stat_removed"] = type(e).__name__
    return out


def poll(sandbox_id: str) -> dict:
    try:
        sb = modal.Sandbox.from_id(sandbox_id)
        return {"poll": sb.poll()}
    except modal.exception.Error as e:
        return {"error": type(e).__name__, "message": str(e)}


def create(app_name: str, name: str) -> dict:
    app = modal.App.lookup(app_name, create_if_missing=True)
    sb = modal.Sandbox.create(
        app=app,
        image=modal.Image.from_registry("python:3.12-slim"),
        name=name,
        timeout=600,
        workdir="/workspace",
        block_network=True,
        tags={"made_by": "modal_client.py"},
    )
    return {"object_id": sb.object_id, "app_id": app.app_id}


def unserved(sandbox_id: str) -> dict:
    # Tunnels are no part of a handoff, so the fake does not serve them.
    sb = modal.Sandbox.from_id(sandbox_id)
    try:
        sb.tunnels(timeout=5)
    except modal.exception.Error as e:
        return {"error": type(e).__name__, "message": str(e)}
    return {"error": None}


def main() -> None:
    verb, *args = sys.argv[1:]
    result = {"check": check, "poll": poll, "create": create, "unserved": unserved}[verb](*args)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
