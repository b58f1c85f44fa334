package footer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// checkerPy validates a bundle the way the coordinator's reader does (spec
// 1.2), with PyYAML's safe_load, and prints the Python types of the values
// YAML 1.1 could misread, so the test sees what Airflow would see.
const checkerPy = `
import hashlib, os, struct, sys, yaml
path = sys.argv[1]
size = os.path.getsize(path)
with open(path, "rb") as f:
    f.seek(size - 64)
    tr = f.read(64)
    assert tr[56:] == b"AFBNDL01", "magic"
    src_len, meta_len, ver = struct.unpack("<III", tr[:12])
    assert ver == 1, "version"
    assert tr[44:56] == bytes(12), "reserved"
    meta_start = size - 64 - meta_len
    src_start = meta_start - src_len
    assert src_start > 0, "binary region"
    f.seek(0)
    assert hashlib.sha256(f.read(src_start)).digest() == tr[12:44], "hash"
    src = f.read(src_len)
    f.seek(meta_start)
    meta = yaml.safe_load(f.read(meta_len).decode("utf-8"))
assert isinstance(meta, dict), "mapping"
v = meta["sdk"]["supervisor_schema_version"]
assert isinstance(v, str) and v, "schema version"
for dag_id, dag in meta["dags"].items():
    print(type(dag_id).__name__, dag_id, [type(t).__name__ + ":" + str(t) for t in dag["tasks"]])
print("extra", sorted((k, type(x).__name__) for k, x in meta["x_vendor"].items()))
# The Gen C source index (spec 2.3), checked as a newer reader would.
paths = []
for s in meta["sources"]:
    assert isinstance(s["offset"], int) and isinstance(s["length"], int), "offset, length"
    assert 0 <= s["offset"] and s["offset"] + s["length"] <= src_len, "within the region"
    assert hashlib.sha256(src[s["offset"]:s["offset"] + s["length"]]).hexdigest() == s["sha256"], "sha256"
    paths.append(s["path"])
assert len(set(paths)) == len(paths), "unique paths"
assert meta["entrypoint_path"] in paths, "entrypoint"
print("sources", [(s["path"], s["offset"], s["length"]) for s in meta["sources"]], meta["entrypoint_path"])
`

// TestPyYAMLReadsWhatWePack runs Airflow's parser (PyYAML) over a packed
// bundle. It needs python3 with PyYAML; without them it is skipped, and says so.
func TestPyYAMLReadsWhatWePack(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		skipUnlessCI(t, "python3 not installed: cannot cross-check with PyYAML")
	}
	if err := exec.Command(py, "-c", "import yaml").Run(); err != nil {
		skipUnlessCI(t, "PyYAML not installed (apt-get install python3-yaml): cannot cross-check with PyYAML")
	}
	out := filepath.Join(t.TempDir(), "bundle")
	if _, err := Pack(out, writeTemp(t, "exe", fakeBinary(4096)), []byte("src"), sampleManifest()); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "check.py")
	if err := os.WriteFile(script, []byte(checkerPy), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := exec.Command(py, script, out).CombinedOutput()
	if err != nil {
		t.Fatalf("the Python reader rejects the bundle: %v\n%s", err, got)
	}
	for _, want := range []string{
		"str 123 ['str:true', 'str:yes', 'str:2026-01-01']",
		"str etl ['str:extract', 'str:transform', 'str:load']",
		"extra [('list', 'list'), ('n', 'int'), ('on', 'bool')]",
		"sources [('bundle.yaml', 0, 3)] bundle.yaml",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("PyYAML output lacks %q:\n%s", want, got)
		}
	}
}

// skipUnlessCI skips a test whose tool is missing on a developer's machine,
// but fails it in CI, which installs the tool (.ci/run): there a skip would
// pass off missing coverage as a green run.
func skipUnlessCI(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(why + "; CI must install it (see .ci/run)")
	}
	t.Skip(why)
}
