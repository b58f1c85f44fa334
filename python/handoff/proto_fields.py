"""Print the wire shape of RPCs as modal's own modal_proto package defines them.

    python proto_fields.py modal.client.ModalClient.SandboxWait ...

For each method: its input and output message, and every message and enum
reachable from them. Fields are keyed by number, since the wire knows nothing
else; testing/fakemodal compares this with the Go SDK's generated protos.
"""

from __future__ import annotations

import json
import sys

from google.protobuf import descriptor_pool
from modal_proto import api_pb2, task_command_router_pb2  # noqa: F401  (registers the files)


def main() -> None:
    pool = descriptor_pool.Default()
    messages: dict[str, dict] = {}
    enums: dict[str, dict] = {}
    methods: dict[str, dict] = {}

    def walk(msg) -> None:
        if msg.full_name in messages:
            return
        fields: dict[str, dict] = {}
        messages[msg.full_name] = fields
        for f in msg.fields:
            fields[str(f.number)] = {
                "name": f.name,
                "kind": f.type,
                # descriptor.proto numbering: optional 1, required 2, repeated 3
                "cardinality": 3 if f.is_repeated else (2 if f.is_required else 1),
                "type": f.message_type.full_name if f.message_type else (f.enum_type.full_name if f.enum_type else ""),
            }
            if f.message_type is not None:
                walk(f.message_type)
            if f.enum_type is not None:
                enums[f.enum_type.full_name] = {v.name: v.number for v in f.enum_type.values}

    for name in sys.argv[1:]:
        m = pool.FindMethodByName(name)
        methods[name] = {
            "input": m.input_type.full_name,
            "output": m.output_type.full_name,
            "client_streaming": m.client_streaming,
            "server_streaming": m.server_streaming,
        }
        walk(m.input_type)
        walk(m.output_type)
    json.dump({"methods": methods, "messages": messages, "enums": enums}, sys.stdout)


if __name__ == "__main__":
    main()
