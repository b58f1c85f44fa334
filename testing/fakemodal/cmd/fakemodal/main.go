// Command fakemodal runs the fake Modal server on 127.0.0.1 until it is
// interrupted, so a handoff Dag (Go bundle tasks on backend modal, a Python
// SandboxToolset attaching with ModalSandboxBackend) can be tried without a
// Modal account. It prints the environment both sides need.
//
//	go run -trimpath ./testing/fakemodal/cmd/fakemodal [-addr 127.0.0.1:PORT] [-env-file PATH] [-v]
//
// Sandbox commands run on this machine inside bubblewrap sandboxes (the
// local backend's driver), so bubblewrap must be installed
// (scripts/ensure-tools.sh does it).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/testing/fakemodal"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "loopback address to listen on")
	root := flag.String("root", "", "directory for the sandboxes' files (default: a temporary directory, removed on exit)")
	tokenID := flag.String("token-id", fakemodal.DefaultTokenID, "token id the fake accepts")
	tokenSecret := flag.String("token-secret", fakemodal.DefaultTokenSecret, "token secret the fake accepts")
	envFile := flag.String("env-file", "", "also write the export lines to this file (source it in another shell)")
	verbose := flag.Bool("v", false, "log every RPC")
	flag.Parse()

	level := hclog.Info
	if *verbose {
		level = hclog.Debug
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "fakemodal", Level: level, Output: os.Stderr})
	s, err := fakemodal.New(fakemodal.Options{Addr: *addr, Root: *root, TokenID: *tokenID, TokenSecret: *tokenSecret, Logger: log})
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakemodal: %v\n", err)
		os.Exit(1)
	}
	exports := exportLines(s)
	fmt.Printf("# fakemodal serves Modal's control plane and task command router on %s.\n", s.Addr())
	fmt.Println("# Export these where the Go bundle and the Python provider run:")
	fmt.Print(exports)
	if *envFile != "" {
		if err := os.WriteFile(*envFile, []byte(exports), 0o600); err != nil {
			fmt.Fprintf(os.Stderr, "fakemodal: writing %s: %v\n", *envFile, err)
			s.Close()
			os.Exit(1)
		}
		fmt.Printf("# (also written to %s)\n", *envFile)
	}
	fmt.Println("# Ctrl-C stops the fake and destroys every sandbox it runs.")

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	<-stop
	s.Close()
	if m := s.Unimplemented(); len(m) > 0 {
		fmt.Fprintf(os.Stderr, "fakemodal: clients called RPCs the fake does not serve: %s\n", strings.Join(m, ", "))
	}
}

// exportLines are shell export lines: the Modal client settings, plus the
// modal_default Airflow connection that the bundle's modal backend and the
// Python provider's ModalHook read the token from.
func exportLines(s *fakemodal.Server) string {
	env := s.Env()
	conn, _ := json.Marshal(map[string]string{"conn_type": "modal", "login": s.TokenID(), "password": s.TokenSecret()})
	env["AIRFLOW_CONN_MODAL_DEFAULT"] = string(conn)
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "export %s='%s'\n", k, env[k])
	}
	return b.String()
}
