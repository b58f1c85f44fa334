// Command execd stands in for OpenSandbox's execd where the real one is
// not at hand (`make opensandbox-e2e` without OPENSANDBOX_EXECD_BIN): the
// real opensandbox-server copies it into every sandbox container as
// /opt/opensandbox/execd and starts it from the image's bootstrap script.
// It answers execd's API on port 44772 as testing/fakeopensandbox's execd
// does (the answers recorded from execd built from OpenSandbox's source,
// main branch; docs/opensandbox-execd.md), running the commands and file
// operations for real inside the container, and proxies
// /proxy/{port}/... to that port inside the sandbox's network namespace,
// as execd does (the server hands out the egress sidecar's endpoint as
// <execd>/proxy/18080).
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/testing/fakeopensandbox"
)

func main() {
	port := flag.Int("port", 44772, "port to listen on, on every interface, as execd does")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.LUTC)
	wd, err := os.Getwd()
	if err != nil {
		log.Fatalf("execd stand-in: %v", err)
	}
	api, stop, err := fakeopensandbox.NewExecd(fakeopensandbox.ExecdOptions{
		Driver: &host{}, Workdir: wd, Version: fakeopensandbox.VersionMain, OverlayFS: onOverlay(wd),
	})
	if err != nil {
		log.Fatalf("execd stand-in: %v", err)
	}
	defer stop()
	log.Printf("execd stand-in: listening on :%d", *port)
	log.Fatal(http.ListenAndServe(":"+strconv.Itoa(*port), routes(api, *port)))
}

// routes serves execd's API at the root and /proxy/{port}/... by
// forwarding to that port on this namespace's loopback; its own port
// (the server hands out execd's endpoint as <host port>/proxy/44772) is
// served in place, without a hop.
func routes(api http.Handler, self int) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", api)
	// One connection per request: a command stream the client leaves after
	// its terminal event is cut while the backend lingers, and a
	// connection being torn down must never carry the next request.
	tr := &http.Transport{DisableCompression: true, DisableKeepAlives: true}
	mux.HandleFunc("/proxy/{port}/{path...}", func(w http.ResponseWriter, r *http.Request) {
		p, err := strconv.Atoi(r.PathValue("port"))
		if err != nil || p < 1 || p > 65535 {
			http.Error(w, "invalid port", http.StatusBadRequest)
			return
		}
		if p == self {
			r2 := r.Clone(r.Context())
			r2.URL.Path, r2.URL.RawPath = "/"+r.PathValue("path"), ""
			api.ServeHTTP(w, r2)
			return
		}
		target := &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(p)}
		proxy := &httputil.ReverseProxy{
			Transport: tr,
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				pr.Out.URL.Path = "/" + pr.In.PathValue("path")
				pr.Out.URL.RawPath = ""
			},
			FlushInterval: -1, // command streams go out as they come
		}
		proxy.ServeHTTP(w, r)
	})
	return mux
}

// onOverlay reports whether dir lies on an overlay file system (a
// container's root), where a directory download fails as execd's does.
func onOverlay(dir string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	best, fstype := -1, ""
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(f) < 5 || sep < 0 || sep+1 >= len(f) {
			continue
		}
		mp := f[4]
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > best {
			best, fstype = len(mp), f[sep+1]
		}
	}
	return fstype == "overlay"
}
