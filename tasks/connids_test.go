package tasks

import (
	"slices"
	"testing"
)

// Issue 38, item 1: each kind's input names every connection its task
// reads, so the runtime masks their secrets in the rendered fields and the
// map index before the task has read them itself.
func TestEveryInputNamesItsConnections(t *testing.T) {
	prov := ProvisionInput{BackendOptions: BackendOptions{ConnID: "backend_c"}, StorageConnID: "storage_c",
		StageIn: map[string]string{"in/a": "s3://stage_c@bucket/a", "in/b": "file:///data/b"},
		EnvFrom: map[string]EnvSource{"TOKEN": {Connection: "env_c", Field: "password"}, "V": {Variable: "v"}}}
	sandbox := SandboxRef{ID: "sb", Backend: "local", ConnID: "record_c"}
	exports := map[string]string{"out/x": "gs://export_url_c@bucket/x"}
	for name, c := range map[string]struct {
		in   interface{ ConnectionIDs() []string }
		want []string
	}{
		"provision": {prov, []string{"backend_c", "storage_c", "stage_c", "env_c"}},
		"convert":   {ConvertInput{ProvisionInput: prov, ExportConnID: "export_c", Exports: exports}, []string{"backend_c", "storage_c", "stage_c", "env_c", "export_c", "export_url_c"}},
		"run":       {RunInput{Sandbox: sandbox}, []string{"record_c"}},
		"destroy":   {DestroyInput{BackendOptions: BackendOptions{ConnID: "backend_c"}, Sandbox: sandbox}, []string{"backend_c", "record_c"}},
		"export":    {ExportInput{Sandbox: sandbox, ExportConnID: "export_c", Exports: exports}, []string{"record_c", "export_c", "export_url_c"}},
		"collect":   {CollectInput{Sandbox: sandbox, Exports: exports}, []string{"record_c", "export_url_c"}},
		"list":      {ListInput{Prefix: "s3://prefix_c@bucket/in/", StorageConnID: "storage_c"}, []string{"storage_c", "prefix_c"}},
		"sweep":     {SweepInput{BackendOptions: BackendOptions{ConnID: "backend_c"}, Storage: []string{"s3://prefix_c@bucket/in/"}}, []string{"backend_c", "prefix_c"}},
		"sweep all": {SweepAllInput{Backends: []BackendOptions{{ConnID: "b1"}, {ConnID: "b2"}}, StorageConnID: "storage_c"}, []string{"storage_c", "b1", "b2"}},
	} {
		var got []string
		for _, id := range c.in.ConnectionIDs() {
			if id != "" {
				got = append(got, id)
			}
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}
