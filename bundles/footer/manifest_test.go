package footer

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func TestRenderGolden(t *testing.T) {
	m := sampleManifest()
	m.Digests.Integrity = "ab"
	m.Extra["list_of_maps"] = []any{map[string]any{"path": "a.go", "length": 3}, []any{"x"}, map[string]any{}}
	m.Extra["quote me"] = "say \"hi\"\n<&>"
	want := `airflow_bundle_metadata_version: "1.0"
dags:
  "123":
    tasks:
      - "true"
      - "yes"
      - "2026-01-01"
  etl:
    tasks:
      - "extract"
      - "transform"
      - "load"
  solo:
    tasks: []
digests:
  integrity: "ab"
list_of_maps:
  - length: 3
    path: "a.go"
  -
    - "x"
  - {}
"quote me": "say \"hi\"\n<&>"
sdk:
  language: "go"
  supervisor_schema_version: "2026-10-30"
  version: "v1.2.3"
source: "bundle.yaml"
x_vendor:
  list:
    - "a"
    - 1.5
    - null
  n: 3
  "on": true
`
	got, err := m.Render()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("render:\n%s\nwant:\n%s", got, want)
	}
	back, err := ParseManifest(got)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, m) {
		t.Errorf("render -> parse lost something:\n%#v\n%#v", back, m)
	}
}

func TestRenderFloatsStayFloats(t *testing.T) {
	for f, want := range map[float64]string{2: "2.0", 0.5: "0.5", 1e20: "1.0e+20", -1.5e-7: "-1.5e-07", 0: "0.0"} {
		if got := float(f); got != want {
			t.Errorf("float(%v) = %q, want %q", f, got, want)
		}
	}
	if _, err := (Manifest{Extra: map[string]any{"c": make(chan int)}}).Render(); err == nil || !strings.Contains(err.Error(), "c: cannot write a chan int") {
		t.Errorf("rendering a channel: %v", err)
	}
}

func TestDecodeManifestAcceptsJSON(t *testing.T) {
	js := `{
    "airflow_bundle_metadata_version": "1.0",
    "sdk": {"language": "go", "version": "(devel)", "extra_sdk": 1},
    "dags": {"etl": {"tasks": ["b", "a"], "owner": "me"}},
    "x": [1, 2]
}
`
	m, err := DecodeManifest([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if m.SDK.Version != "(devel)" || m.SDK.Extra["extra_sdk"] != 1 || m.SDK.SupervisorSchemaVersion != "" {
		t.Errorf("sdk %+v", m.SDK)
	}
	if d := m.Dags["etl"]; !reflect.DeepEqual(d.Tasks, []string{"b", "a"}) || d.Extra["owner"] != "me" {
		t.Errorf("dag %+v", d)
	}
	if !reflect.DeepEqual(m.Extra["x"], []any{1, 2}) {
		t.Errorf("extra %#v", m.Extra)
	}
	// Lenient: no schema version is fine here, the packer adds it; strict is not.
	if _, err := ParseManifest([]byte(js)); err == nil {
		t.Error("ParseManifest accepted a manifest without supervisor_schema_version")
	}
}

func TestDecodeManifestErrorsNameTheField(t *testing.T) {
	cases := map[string]string{
		"sdk: [a]\n":                    "sdk is a YAML list",
		"dags: {etl: [a]}\n":            "dags.etl is a YAML list",
		"dags: {etl: {tasks: a}}\n":     "dags.etl.tasks is a YAML string",
		"dags: {etl: {tasks: [[a]]}}\n": "dags.etl.tasks[0] is a YAML list",
		"source: {a: b}\n":              "source is a YAML mapping",
		"digests: 3\n":                  "digests is a YAML scalar (!!int)",
		"x: !custom 3\n":                "tag !custom",
	}
	for in, want := range cases {
		_, err := DecodeManifest([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", in, err, want)
		}
	}
}

func TestDagIDsSorted(t *testing.T) {
	if got := sampleManifest().DagIDs(); !reflect.DeepEqual(got, []string{"123", "etl", "solo"}) {
		t.Errorf("DagIDs = %v", got)
	}
}

func FuzzRead(f *testing.F) {
	good := assemble(fakeBinary(64), []byte("src"), []byte(goodMeta))
	f.Add(good)
	f.Add(good[:70])
	f.Add(assemble([]byte{1}, nil, []byte("- a")))
	f.Add(assemble([]byte{1}, nil, []byte("a: &x [*x]")))
	f.Add([]byte("AFBNDL01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ReadFrom(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		// Whatever was accepted must be self-consistent.
		if b.SourceStart <= 0 || b.SourceStart > b.MetadataStart || b.MetadataStart > b.TrailerStart || b.TrailerStart != int64(len(data))-TrailerSize {
			t.Fatalf("inconsistent regions %+v", b)
		}
		if b.Manifest.SDK.SupervisorSchemaVersion == "" {
			t.Fatal("accepted a manifest without supervisor_schema_version")
		}
		if _, err := b.Manifest.Render(); err != nil {
			t.Fatalf("an accepted manifest does not render: %v", err)
		}
	})
}

func FuzzManifest(f *testing.F) {
	f.Add([]byte(goodMeta))
	f.Add([]byte(goodMeta + "x: {a: [1, 2.5, null, true, 2026-01-01]}\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte(`{"sdk": {"supervisor_schema_version": "x"}, "dags": {"1": null}}`))
	f.Fuzz(func(t *testing.T, meta []byte) {
		// Through the whole reader, with a valid trailer and hash around it.
		b := assemble([]byte{0x7f}, nil, meta)
		if _, err := ReadFrom(bytes.NewReader(b), int64(len(b))); err != nil {
			return
		}
		m, err := ParseManifest(meta)
		if err != nil {
			t.Fatalf("ReadFrom accepted metadata ParseManifest rejects: %v", err)
		}
		// Rendering is idempotent: render -> parse -> render gives the same bytes.
		r1, err := m.Render()
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		m2, err := ParseManifest(r1)
		if err != nil {
			t.Fatalf("our own rendering does not parse: %v\n%s", err, r1)
		}
		r2, err := m2.Render()
		if err != nil || !bytes.Equal(r1, r2) {
			t.Fatalf("render not idempotent (%v):\n%s\n---\n%s", err, r1, r2)
		}
	})
}
