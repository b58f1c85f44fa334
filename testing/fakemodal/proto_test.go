package fakemodal

import (
	"sort"
	"strconv"
	"testing"

	_ "github.com/modal-labs/modal-client/go/proto/modal_proto" // registers the Go SDK's protos
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/airflow-sandbox/airflow-go-worker/testing/pyenv"
)

// handoffRPCs are the RPCs the fake serves for a handoff: what either
// client calls to provision, attach, run, read and write files, list,
// sweep and destroy.
var handoffRPCs = []string{
	"modal.client.ModalClient.ClientHello",
	"modal.client.ModalClient.AuthTokenGet",
	"modal.client.ModalClient.AppGetOrCreate",
	"modal.client.ModalClient.EnvironmentGetOrCreate",
	"modal.client.ModalClient.ImageGetOrCreate",
	"modal.client.ModalClient.SecretGetOrCreate",
	"modal.client.ModalClient.SandboxCreate",
	"modal.client.ModalClient.SandboxCreateV2",
	"modal.client.ModalClient.SandboxWait",
	"modal.client.ModalClient.SandboxWaitV2",
	"modal.client.ModalClient.SandboxGetTaskId",
	"modal.client.ModalClient.SandboxGetTaskIdV2",
	"modal.client.ModalClient.SandboxGetCommandRouterAccess",
	"modal.client.ModalClient.TaskGetCommandRouterAccess",
	"modal.client.ModalClient.SandboxTagsGet",
	"modal.client.ModalClient.SandboxTagsGetV2",
	"modal.client.ModalClient.SandboxTagsSet",
	"modal.client.ModalClient.SandboxTagsSetV2",
	"modal.client.ModalClient.SandboxList",
	"modal.client.ModalClient.SandboxListV2",
	"modal.client.ModalClient.SandboxTerminate",
	"modal.client.ModalClient.SandboxTerminateV2",
	"modal.client.ModalClient.SandboxGetFromName",
	"modal.client.ModalClient.SandboxGetFromNameV2",
	"modal.task_command_router.TaskCommandRouter.TaskExecStart",
	"modal.task_command_router.TaskCommandRouter.TaskExecStdioRead",
	"modal.task_command_router.TaskCommandRouter.TaskExecWait",
	"modal.task_command_router.TaskCommandRouter.TaskExecPoll",
	"modal.task_command_router.TaskCommandRouter.TaskExecStdinWrite",
	"modal.task_command_router.TaskCommandRouter.TaskExecStdinWriteStream",
	"modal.task_command_router.TaskCommandRouter.TaskExecStdinStatus",
}

type wireField struct {
	Name        string `json:"name"`
	Kind        int    `json:"kind"`        // descriptor.proto's type number
	Cardinality int    `json:"cardinality"` // optional 1, required 2, repeated 3
	Type        string `json:"type"`        // message or enum full name
}

type methodShape struct {
	Input           string `json:"input"`
	Output          string `json:"output"`
	ClientStreaming bool   `json:"client_streaming"`
	ServerStreaming bool   `json:"server_streaming"`
}

type wireShape struct {
	Methods  map[string]methodShape          `json:"methods"`
	Messages map[string]map[string]wireField `json:"messages"`
	Enums    map[string]map[string]int       `json:"enums"`
}

// goWireShape is proto_fields.py's output, from the Go SDK's protos.
func goWireShape(t *testing.T, methods []string) wireShape {
	out := wireShape{Methods: map[string]methodShape{}, Messages: map[string]map[string]wireField{}, Enums: map[string]map[string]int{}}
	var walk func(md protoreflect.MessageDescriptor)
	walk = func(md protoreflect.MessageDescriptor) {
		name := string(md.FullName())
		if _, seen := out.Messages[name]; seen {
			return
		}
		fields := map[string]wireField{}
		out.Messages[name] = fields
		for i := 0; i < md.Fields().Len(); i++ {
			f := md.Fields().Get(i)
			wf := wireField{Name: string(f.Name()), Kind: int(f.Kind()), Cardinality: int(f.Cardinality())}
			if m := f.Message(); m != nil {
				wf.Type = string(m.FullName())
				walk(m)
			}
			if e := f.Enum(); e != nil {
				wf.Type = string(e.FullName())
				vals := map[string]int{}
				for j := 0; j < e.Values().Len(); j++ {
					vals[string(e.Values().Get(j).Name())] = int(e.Values().Get(j).Number())
				}
				out.Enums[wf.Type] = vals
			}
			fields[strconv.Itoa(int(f.Number()))] = wf
		}
	}
	for _, name := range methods {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			t.Fatalf("the Go SDK has no %s: %v", name, err)
		}
		md := d.(protoreflect.MethodDescriptor)
		out.Methods[name] = methodShape{Input: string(md.Input().FullName()), Output: string(md.Output().FullName()),
			ClientStreaming: md.IsStreamingClient(), ServerStreaming: md.IsStreamingServer()}
		walk(md.Input())
		walk(md.Output())
	}
	return out
}

// The fake is built on the Go SDK's protos (modal-go v0.11.1) and serves
// the Python client (modal 1.6.4), which has its own. For every RPC of a
// handoff and every message and enum they reach, the two must agree on the
// wire: a field number means the same type in both, and an enum value name
// the same number. A field only one side knows is fine (the other skips it).
func TestProtosAgreeOnTheWireWithPythonClient(t *testing.T) {
	var py wireShape
	pyenv.RunJSON(t, nil, &py, "handoff/proto_fields.py", handoffRPCs...)
	gosh := goWireShape(t, handoffRPCs)

	for _, name := range handoffRPCs {
		if py.Methods[name] != gosh.Methods[name] {
			t.Errorf("%s: Python %+v, Go %+v", name, py.Methods[name], gosh.Methods[name])
		}
	}
	compared := 0
	for _, msg := range sortedKeys(gosh.Messages) {
		pyFields, ok := py.Messages[msg]
		if !ok {
			continue // reached only through a field Python lacks
		}
		for _, num := range sortedKeys(gosh.Messages[msg]) {
			gf, pf := gosh.Messages[msg][num], pyFields[num]
			if _, both := pyFields[num]; !both {
				continue
			}
			compared++
			if gf.Kind != pf.Kind || gf.Cardinality != pf.Cardinality || gf.Type != pf.Type {
				t.Errorf("%s field %s: Go %+v, Python %+v", msg, num, gf, pf)
			}
		}
	}
	for _, enum := range sortedKeys(gosh.Enums) {
		for value, n := range gosh.Enums[enum] {
			if pn, ok := py.Enums[enum][value]; ok && pn != n {
				t.Errorf("enum %s value %s: Go %d, Python %d", enum, value, n, pn)
			}
		}
	}
	// Guards the comparison itself: a walk that found nothing compares nothing.
	if compared < 200 {
		t.Fatalf("compared only %d fields; the descriptor walk is broken", compared)
	}
	t.Logf("%d RPCs, %d messages, %d fields agree", len(handoffRPCs), len(gosh.Messages), compared)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
