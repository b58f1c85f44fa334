"""Drives an OpenSandbox server through the official Python SDK (opensandbox,
pinned in python/requirements.lock) and prints one JSON document: what each
call answered, with what differs from run to run (ids, times, sizes of
directories) left out, so that answers from testing/fakeopensandbox and
from a real execd can be compared (testing/fakeopensandbox/sdk_test.go).

Connection: OPEN_SANDBOX_DOMAIN, OPEN_SANDBOX_API_KEY, OPEN_SANDBOX_PROTOCOL
(http). The sandbox's workdir is /workspace, as the fake's.
"""

import json
import os
import sys
import time
from datetime import timedelta

from opensandbox.config.connection_sync import ConnectionConfigSync
from opensandbox.exceptions.sandbox import SandboxApiException, SandboxException
from opensandbox.models.execd import RunCommandOpts
from opensandbox.models.filesystem import (
    ContentReplaceEntry,
    DirectoryListEntry,
    MoveEntry,
    SearchEntry,
    SetPermissionEntry,
    WriteEntry,
)
from opensandbox.sync.sandbox import SandboxSync

W = "/workspace"
answers = []


def error(e):
    """An exception as its class, HTTP status and execd's {code, message}."""
    out = {"exception": type(e).__name__}
    if isinstance(e, SandboxApiException):
        out["status"] = e.status_code
        body = e.response_body
        if isinstance(body, (bytes, bytearray)):
            body = body.decode("utf-8", "replace")
        out["body"] = body
    elif isinstance(e, SandboxException) and e.error is not None:
        out["code"] = e.error.code
    return out


def scrub(answer, ident):
    """answer with a run's own id replaced by a placeholder."""
    return json.loads(json.dumps(answer).replace(ident, "<id>"))


def call(name, fn):
    try:
        answers.append({"call": name, "answer": fn()})
    except Exception as e:  # every answer is recorded, errors included
        answers.append({"call": name, "error": error(e)})


def execution(ex):
    out = {
        "has_id": bool(ex.id),
        "exit_code": ex.exit_code,
        "stdout": [m.text for m in ex.logs.stdout],
        "stderr": [m.text for m in ex.logs.stderr],
        "complete": ex.complete is not None,
    }
    if ex.error is not None:
        out["error"] = {"name": ex.error.name, "value": ex.error.value, "traceback": ex.error.traceback}
    return out


def entry(e, with_size=True):
    out = {"path": e.path, "type": e.entry_type, "mode": e.mode, "owner": e.owner, "group": e.group}
    if with_size:
        out["size"] = e.size
    return out


def status(st):
    return {"content": st.content, "running": st.running, "exit_code": st.exit_code, "error": st.error,
            "has_started_at": st.started_at is not None, "has_finished_at": st.finished_at is not None}


def wait_finished(sb, cid):
    # A bounded poll of the command's own state, not a timed guess.
    for _ in range(600):
        st = sb.commands.get_command_status(cid)
        if not st.running:
            return st
        time.sleep(0.05)
    raise RuntimeError("the background command did not finish within 30 s")


def main():
    config = ConnectionConfigSync(
        domain=os.environ["OPEN_SANDBOX_DOMAIN"],
        api_key=os.environ.get("OPEN_SANDBOX_API_KEY"),
        protocol=os.environ.get("OPEN_SANDBOX_PROTOCOL", "http"),
        request_timeout=timedelta(seconds=20),
        disable_metrics=True,
    )
    sb = SandboxSync.create("python:3.12-slim", connection_config=config, timeout=timedelta(minutes=10),
                            ready_timeout=timedelta(seconds=60))
    try:
        run(sb)
    finally:
        sb.kill()
        sb.close()
    json.dump(answers, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


def run(sb):
    cmd, files = sb.commands, sb.files
    opts = RunCommandOpts(working_directory=W)

    # Foreground commands: streams, exit codes, what JSON transport does to bytes.
    call("run: exit 3", lambda: execution(cmd.run("echo out; echo; printf no-newline; echo err >&2; exit 3", opts=opts)))
    call("run: true", lambda: execution(cmd.run("true", opts=opts)))
    call("run: CRLF", lambda: execution(cmd.run("printf 'a\\r\\nb\\rc\\n'", opts=opts)))
    call("run: not UTF-8", lambda: execution(cmd.run("printf 'x\\377y\\n'", opts=opts)))
    call("run: timeout", lambda: execution(cmd.run("echo start; sleep 30", opts=RunCommandOpts(working_directory=W, timeout=timedelta(seconds=1)))))
    call("run: missing cwd", lambda: execution(cmd.run("pwd", opts=RunCommandOpts(working_directory="/nonexistent"))))
    call("run: env", lambda: execution(cmd.run('echo "$A1"', opts=RunCommandOpts(working_directory=W, envs={"A1": "v 1"}))))

    # Background commands: status and logs with a byte cursor.
    def background():
        ex = cmd.run("echo one; echo two >&2; echo three; exit 7", opts=RunCommandOpts(working_directory=W, background=True))
        out = {"start": execution(ex)}
        st = wait_finished(sb, ex.id)
        out["status"] = status(st)
        logs = cmd.get_background_command_logs(ex.id)
        out["logs"] = {"content": logs.content, "cursor": logs.cursor}
        tail = cmd.get_background_command_logs(ex.id, cursor=4)
        out["logs from 4"] = {"content": tail.content, "cursor": tail.cursor}
        return out
    call("background command", background)

    def foreground_status():
        ex = cmd.run("echo fg; exit 2", opts=opts)
        out = {"status": status(cmd.get_command_status(ex.id))}
        try:
            cmd.get_background_command_logs(ex.id)
            out["logs"] = "answered"
        except Exception as e:
            out["logs"] = error(e)
        try:
            cmd.interrupt(ex.id)
            out["interrupt"] = "answered"
        except Exception as e:
            out["interrupt"] = error(e)
        return scrub(out, ex.id)
    call("foreground command's status, logs, interrupt", foreground_status)
    call("status of an unknown command", lambda: status(cmd.get_command_status("0123456789abcdef0123456789abcdef")))

    # Files.
    call("write_file", lambda: files.write_file(W + "/a.txt", "hello world, hello\n", mode=644))
    call("read_file", lambda: files.read_file(W + "/a.txt"))
    call("read_file range", lambda: files.read_file(W + "/a.txt", range_header="bytes=0-4"))
    call("read_file range past the end", lambda: files.read_file(W + "/a.txt", range_header="bytes=100-200"))
    call("read_file malformed range", lambda: files.read_file(W + "/a.txt", range_header="foo"))
    call("read_file offset/limit", lambda: files.read_file(W + "/a.txt", offset=2, limit=1))
    call("read_file missing", lambda: files.read_file(W + "/missing.txt"))
    call("read_file of a directory", lambda: files.read_file(W))
    call("get_file_info file", lambda: {p: entry(e) for p, e in files.get_file_info([W + "/a.txt"]).items()})
    call("get_file_info directory", lambda: {p: entry(e, False) for p, e in files.get_file_info([W]).items()})
    call("get_file_info missing", lambda: {p: entry(e) for p, e in files.get_file_info([W + "/missing"]).items()})
    call("create_directories", lambda: files.create_directories([WriteEntry(path=W + "/d/sub", mode=755)]))
    call("write_files", lambda: files.write_files([
        WriteEntry(path=W + "/d/x.txt", data="x", mode=600),
        WriteEntry(path=W + "/d/sub/y.txt", data="yy", mode=644),
        WriteEntry(path=W + "/d/z.log", data="zzz", mode=644),
    ]))
    call("symlink", lambda: execution(cmd.run("ln -s x.txt d/link.txt && ln -s nowhere d/dangling", opts=opts)))
    call("get_file_info symlink", lambda: {p: entry(e) for p, e in files.get_file_info([W + "/d/link.txt"]).items()})
    call("get_file_info dangling symlink", lambda: {p: entry(e) for p, e in files.get_file_info([W + "/d/dangling"]).items()})
    call("search *.txt", lambda: sorted((entry(e) for e in files.search(SearchEntry(path=W + "/d", pattern="*.txt"))), key=lambda e: e["path"]))
    call("search missing", lambda: files.search(SearchEntry(path=W + "/nope", pattern="*")))
    call("list_directory", lambda: sorted((entry(e, False) for e in files.list_directory(DirectoryListEntry(path=W + "/d", depth=1))), key=lambda e: e["path"]))
    call("move_files", lambda: files.move_files([MoveEntry(src=W + "/a.txt", dest=W + "/moved/b.txt")]))
    call("move_files missing source", lambda: files.move_files([MoveEntry(src=W + "/a.txt", dest=W + "/c.txt")]))
    call("move_files onto an existing file", lambda: files.move_files([MoveEntry(src=W + "/d/x.txt", dest=W + "/d/z.log")]))
    call("set_permissions", lambda: files.set_permissions([SetPermissionEntry(path=W + "/moved/b.txt", mode=600)]))
    call("get_file_info after set_permissions", lambda: {p: entry(e) for p, e in files.get_file_info([W + "/moved/b.txt"]).items()})
    call("replace_contents", lambda: files.replace_contents([ContentReplaceEntry(path=W + "/moved/b.txt", old_content="hello", new_content="bye")]))
    call("read after replace", lambda: files.read_file(W + "/moved/b.txt"))
    call("replace_contents_detailed", lambda: [r.model_dump() for r in files.replace_contents_detailed([ContentReplaceEntry(path=W + "/moved/b.txt", old_content="bye", new_content="ciao")])])
    call("delete_files", lambda: files.delete_files([W + "/moved/b.txt", W + "/never-there"]))
    call("delete_files of a directory", lambda: files.delete_files([W + "/d"]))
    call("delete_directories", lambda: files.delete_directories([W + "/d"]))
    call("get_file_info after delete", lambda: {p: entry(e) for p, e in files.get_file_info([W + "/d"]).items()})

    def metrics():
        m = sb.get_metrics()
        return sorted(k for k, v in m.model_dump().items() if v is not None)
    call("get_metrics fields", metrics)


if __name__ == "__main__":
    main()
