package catalogue

import (
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/bundles"
)

// What can be checked without I/O fails when the config loads (so pack,
// inspect and check refuse it), named by the config's own keys and saying
// what to write instead; before, each of these loaded and failed only
// when the task ran, naming spec fields (timeout) the author never wrote.
func TestLoadRefusesSpecsNoSandboxCanHave(t *testing.T) {
	cases := []struct {
		name, defaults string
		want           []string // the key, then words of the fix
	}{
		{"lifetime over 24h", `lifetime: 48h`, []string{"lifetime: 48h0m0s is longer than the 24h0m0s maximum", "give at most 24h"}},
		{"negative cpu", `cpu: -1`, []string{"cpu: -1 is negative", "give a number of cores"}},
		{"relative workdir", `workdir: data`, []string{`workdir: "data" must be a clean absolute path`, "such as /workspace"}},
		{"owner not a run", `owner: nobody`, []string{`owner: "nobody" is not of the form <dag_id>/<run_id>`, "leave owner out"}},
		{"allowlist on an open network", `network: {block: false, allow_hosts: [x.com]}`, []string{"network.allow_hosts:", "set network.block: true"}},
		{"registry image on local", `image: "python:3.12-slim"`, []string{"local backend refuses", `image: "python:3.12-slim" looks like a registry image`, "ignore_image: true"}},
		{"workdir /tmp on local", `workdir: /tmp`, []string{"local backend refuses", `workdir: "/tmp" cannot be`, "such as /workspace"}},
		{"a forged ownership tag", `tags: {airflow_go_worker_owner: x/y}`, []string{"tags: airflow_go_worker_owner", "choose another name"}},
		{"a variable in env and env_from", `env: {TOKEN: x}, env_from: {TOKEN: {variable: token}}`, []string{"env_from.TOKEN: TOKEN is also set in env", "set it in one place only"}},
		{"modal lifetime under its minimum", `backend: modal, lifetime: 1m`, []string{"modal backend refuses", "lifetime: 1m0s is shorter than Modal's", "at least 2m"}},
		{"opensandbox host allowlist of a URL", `backend: opensandbox, network: {block: true, allow_hosts: ["https://x.com"]}`, []string{"opensandbox backend refuses", `network: allow_hosts entry "https://x.com" is not a host name`, "give a name like pypi.org"}},
		{"opensandbox lifetime under its minimum", `backend: opensandbox, lifetime: 30s`, []string{"opensandbox backend refuses", "lifetime: OpenSandbox needs a lifetime of at least 1m0s"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, kind := range []string{"provision", "convert"} {
				y := "dags: {d: {tasks: {t: {kind: " + kind + ", defaults: {" + c.defaults + "}}}}}"
				err := Load(bundles.New(), []byte(y), "bundle.yaml")
				if err == nil {
					t.Fatalf("%s: %s loaded", kind, y)
				}
				for _, w := range append([]string{"bundle.yaml: dags.d.tasks.t.defaults:"}, c.want...) {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: error %q does not say %q", kind, err, w)
					}
				}
				if strings.Contains(err.Error(), "timeout") {
					t.Errorf("%s: error %q names the spec's timeout, which the config calls lifetime", kind, err)
				}
			}
		})
	}
}

// The same values are fine where they are allowed, and defaults a run
// never uses (an input bound to a Dag param or an upstream's XCom) are not
// held against the config.
func TestLoadAcceptsWhatABackendAllows(t *testing.T) {
	for _, y := range []string{
		`dags: {d: {tasks: {t: {kind: provision, defaults: {lifetime: 24h, cpu: 2, workdir: /data, owner: etl/run1, network: {block: false}, backend: modal, image: "python:3.12-slim"}}}}}`,
		`dags: {d: {tasks: {t: {kind: provision, defaults: {image: "python:3.12-slim", backend_options: {local: {ignore_image: true}}}}}}}`,
		`{backends: {local: {ignore_image: true}}, dags: {d: {tasks: {t: {kind: convert, defaults: {image: "python:3.12-slim"}}}}}}`,
		`dags: {d: {tasks: {t: {kind: provision, defaults: {workdir: /tmp, lifetime: 48h}, inputs: {workdir: {param: wd}, lifetime: {xcom: up}}}}}}`,
		// The backend is chosen at run time: only the rules of every
		// sandbox apply at load.
		`dags: {d: {tasks: {t: {kind: provision, defaults: {image: "python:3.12-slim"}, inputs: {backend: {param: backend}}}}}}`,
	} {
		if err := Load(bundles.New(), []byte(y), "bundle.yaml"); err != nil {
			t.Errorf("%s: %v", y, err)
		}
	}
	// The rules of every sandbox still hold when the backend is bound.
	y := `dags: {d: {tasks: {t: {kind: provision, defaults: {lifetime: 48h}, inputs: {backend: {param: backend}}}}}}`
	if err := Load(bundles.New(), []byte(y), "bundle.yaml"); err == nil || !strings.Contains(err.Error(), "lifetime: 48h0m0s") {
		t.Errorf("%s: %v, want the lifetime refused", y, err)
	}
}
