package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox/registry"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

// Like Airflow's extras (S3 is Airflow's amazon extra), the backends and
// stores beyond the default build (the local backend and file://) are
// chosen when the binary is built, each by a build tag on its one-line
// import file: the cloud SDKs cost every task start their package inits,
// so a binary links only what its bundles use. `make build EXTRAS="s3
// modal"` (or EXTRAS=all) sets the tags.
type extra struct {
	kind   string   // "backend" or "store"
	name   string   // the backend's name, or the store's (storage.Registration.Scheme)
	option string   // the Makefile's EXTRAS entry
	tag    string   // the go build tag
	forms  []string // a store's URL schemes, which a binary without it cannot know
}

var extras = []extra{
	{"backend", "modal", "modal", "backend_modal", nil},
	{"backend", "opensandbox", "opensandbox", "backend_opensandbox", nil},
	{"store", "s3", "s3", "store_s3", []string{"s3", "s3a"}},
	{"store", "gs", "gcs", "store_gcs", []string{"gs", "gcs"}},
	{"store", "az", "azure", "store_azure", []string{"abfs", "abfss", "az", "azblob"}},
}

// allExtrasTag links every extra (EXTRAS=all).
const allExtrasTag = "all_extras"

// A config naming a backend or store this binary lacks is told the exact
// build command that adds it. main's init runs after every imported
// package's, so the hints are set before anything can need them.
func init() {
	registry.Default.SetUnlinkedHint(func(name string) string { return buildHint("backend", name) })
	storage.Default.SetUnlinkedHint(func(form string) (string, string) {
		for _, e := range extras {
			if slices.Contains(e.forms, form) {
				return e.option, buildHint("store", e.name)
			}
		}
		return "", ""
	})
}

// linked reports whether this binary links e.
func (e extra) linked() bool {
	if e.kind == "backend" {
		_, ok := registry.Default.Lookup(e.name)
		return ok
	}
	for _, s := range storage.Default.Names() {
		if s == e.name {
			return true
		}
	}
	return false
}

// buildHint is the build command for a binary that links what this one
// does plus the extra (kind, name), or "" when no extra is called that.
func buildHint(kind, name string) string {
	var options, tags []string
	found := false
	for _, e := range extras {
		want := e.kind == kind && e.name == name
		found = found || want
		if want || e.linked() {
			options = append(options, e.option)
			tags = append(tags, e.tag)
		}
	}
	if !found {
		return ""
	}
	value := strings.Join(options, " ")
	if len(options) > 1 {
		value = `"` + value + `"`
	}
	return fmt.Sprintf("build one that does with `make build EXTRAS=%s` (or `CGO_ENABLED=0 go build -trimpath -tags %s ./cmd/airflow-go-worker`; EXTRAS=all, tag %s, links every backend and store)",
		value, strings.Join(tags, ","), allExtrasTag)
}
