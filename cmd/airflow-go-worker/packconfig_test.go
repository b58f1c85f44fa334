package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pack --config refuses a config whose defaults no sandbox can have, or
// the chosen backend refuses, naming the config's key and the fix, and
// writes no bundle; a good config packs.
func TestPackRefusesASpecCheckedAtLoad(t *testing.T) {
	dir := t.TempDir()
	pack := func(defaults string) (cliResult, string) {
		cfg := filepath.Join(dir, "bundle.yaml")
		y := "dags: {d: {tasks: {p: {kind: provision, defaults: {" + defaults + "}}}}}\n"
		if err := os.WriteFile(cfg, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "out.bundle")
		os.Remove(out)
		return cli(t, nil, "pack", "--config", cfg, "--output", out), out
	}
	for _, c := range []struct{ defaults, key, fix string }{
		{"lifetime: 48h", "lifetime: 48h0m0s", "give at most 24h"},
		{`image: "python:3.12-slim"`, `image: "python:3.12-slim"`, "ignore_image: true"},
	} {
		r, out := pack(c.defaults)
		if r.code == 0 || !strings.Contains(r.stderr, c.key) || !strings.Contains(r.stderr, c.fix) {
			t.Errorf("pack of {%s}: exit %d, stderr %q; want non-zero naming %q and %q", c.defaults, r.code, r.stderr, c.key, c.fix)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("pack of {%s} wrote %s", c.defaults, out)
		}
	}
	if r, out := pack("lifetime: 2h, workdir: /data"); r.code != 0 {
		t.Fatalf("a good config: exit %d, %s", r.code, r.stderr)
	} else if _, err := os.Stat(out); err != nil {
		t.Fatalf("a good config packed no bundle: %v", err)
	}
}
