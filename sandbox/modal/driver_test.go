package modal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/testing/eventually"
	"github.com/airflow-sandbox/airflow-go-worker/testing/fakemodal"
)

func TestCreateMapsSpec(t *testing.T) {
	fake, drv := newFake(t, nil)
	sb := mustCreate(t, drv, sandbox.Spec{
		CPU: 1.5, MemoryMiB: 4096, Lifetime: 600 * time.Second, Workdir: "/work",
		Env: map[string]string{"FOO": "bar"}, Owner: "dag/run",
	})
	defer sb.Destroy(context.Background())
	if !strings.HasPrefix(sb.ID(), "sb-") {
		t.Fatalf("id %q is not a Modal sandbox id", sb.ID())
	}
	recs := fake.Creates()
	if len(recs) != 1 {
		t.Fatalf("%d creates", len(recs))
	}
	r := recs[0]
	def := r.Definition
	switch {
	case !r.V2:
		t.Error("a CPU sandbox should take the V2 create path")
	case r.SandboxID != sb.ID():
		t.Errorf("Info.ID %s is not the created sandbox %s", sb.ID(), r.SandboxID)
	case def.GetTimeoutSecs() != 600:
		t.Errorf("timeout_secs = %d", def.GetTimeoutSecs())
	case def.GetWorkdir() != "/work":
		t.Errorf("workdir = %q", def.GetWorkdir())
	case def.GetResources().GetMilliCpu() != 1500:
		t.Errorf("milli_cpu = %d", def.GetResources().GetMilliCpu())
	case def.GetResources().GetMemoryMb() != 4096:
		t.Errorf("memory_mb = %d", def.GetResources().GetMemoryMb())
	case def.HasIdleTimeoutSecs():
		t.Errorf("idle timeout must never be set, got %d", def.GetIdleTimeoutSecs())
	case def.GetNetworkAccess().GetNetworkAccessType() != pb.NetworkAccess_BLOCKED:
		t.Errorf("default network = %v, want BLOCKED", def.GetNetworkAccess().GetNetworkAccessType())
	case r.Env["FOO"] != "bar":
		t.Errorf("env = %v", r.Env)
	case def.GetName() != r.Tags[sandbox.TagSandbox] || !strings.HasPrefix(def.GetName(), sandbox.NamePrefix):
		t.Errorf("name %q vs tag %q", def.GetName(), r.Tags[sandbox.TagSandbox])
	}
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), `echo "$FOO $PWD"`, sandbox.ExecOptions{Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "bar /work\n" {
		t.Fatalf("exec: %+v %v %q", res, err, out.String())
	}
}

func TestCreateDefaultsAndPlacement(t *testing.T) {
	fake, drv := newFake(t, func(o *Options) {
		o.Regions, o.Cloud = []string{"us-east-1"}, "aws"
	})
	sb := mustCreate(t, drv, sandbox.Spec{GPU: "A100:2", Env: map[string]string{"K": "v"}})
	defer sb.Destroy(context.Background())
	r := fake.Creates()[0]
	def := r.Definition
	if r.V2 {
		t.Error("the SDK creates GPU sandboxes on the V1 path")
	}
	if def.GetTimeoutSecs() != 3600 || def.GetWorkdir() != "/workspace" {
		t.Errorf("defaults: timeout %d workdir %q", def.GetTimeoutSecs(), def.GetWorkdir())
	}
	if g := def.GetResources().GetGpuConfig(); g.GetGpuType() != "A100" || g.GetCount() != 2 {
		t.Errorf("gpu = %v", g)
	}
	if got := def.GetSchedulerPlacement().GetRegions(); len(got) != 1 || got[0] != "us-east-1" {
		t.Errorf("regions = %v", got)
	}
	if def.GetCloudProviderStr() != "aws" {
		t.Errorf("cloud = %q", def.GetCloudProviderStr())
	}
	if r.Env["K"] != "v" {
		t.Errorf("env on the V1 path = %v", r.Env)
	}
	// The V1 sandbox is usable: exec and tags go through the V1 RPCs.
	if tags, err := sb.Tags(context.Background()); err != nil || tags[sandbox.TagSandbox] == "" {
		t.Fatalf("tags of a V1 sandbox: %v %v", tags, err)
	}
	var out bytes.Buffer
	if res, err := sb.Exec(context.Background(), "echo $K", sandbox.ExecOptions{Stdout: &out}); err != nil || res.ExitCode != 0 || out.String() != "v\n" {
		t.Fatalf("exec on a V1 sandbox: %+v %v %q", res, err, out.String())
	}
}

func TestNetworkMapping(t *testing.T) {
	cases := []struct {
		name    string
		policy  sandbox.NetworkPolicy
		sni     bool
		mode    pb.NetworkAccess_NetworkAccessType
		cidrs   []string
		domains []string
	}{
		{"default blocks", sandbox.NetworkPolicy{}, false, pb.NetworkAccess_BLOCKED, nil, nil},
		{"open", sandbox.NetworkPolicy{Open: true}, false, pb.NetworkAccess_OPEN, nil, nil},
		{"cidrs", sandbox.NetworkPolicy{AllowCIDRs: []string{"10.1.0.0/16", "192.0.2.7"}}, false,
			pb.NetworkAccess_ALLOWLIST, []string{"10.1.0.0/16", "192.0.2.7/32"}, nil},
		{"hosts with sni", sandbox.NetworkPolicy{AllowHosts: []string{"API.example.com", "*.pypi.org"}}, true,
			pb.NetworkAccess_ALLOWLIST, nil, []string{"api.example.com", "*.pypi.org"}},
		{"both with sni", sandbox.NetworkPolicy{AllowHosts: []string{"example.com"}, AllowCIDRs: []string{"203.0.113.0/24"}}, true,
			pb.NetworkAccess_ALLOWLIST, []string{"203.0.113.0/24"}, []string{"example.com"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake, drv := newFake(t, func(o *Options) {
				if tc.sni {
					o.EgressEnforcement = EgressSNI
				}
			})
			sb := mustCreate(t, drv, sandbox.Spec{Network: tc.policy})
			defer sb.Destroy(context.Background())
			na := fake.Creates()[0].Definition.GetNetworkAccess()
			if na.GetNetworkAccessType() != tc.mode {
				t.Fatalf("mode %v, want %v", na.GetNetworkAccessType(), tc.mode)
			}
			if fmt.Sprint(na.GetAllowedCidrs()) != fmt.Sprint(tc.cidrs) && !(len(na.GetAllowedCidrs()) == 0 && len(tc.cidrs) == 0) {
				t.Errorf("cidrs %v, want %v", na.GetAllowedCidrs(), tc.cidrs)
			}
			if fmt.Sprint(na.GetAllowedDomains()) != fmt.Sprint(tc.domains) && !(len(na.GetAllowedDomains()) == 0 && len(tc.domains) == 0) {
				t.Errorf("domains %v, want %v", na.GetAllowedDomains(), tc.domains)
			}
		})
	}
}

func TestRefusalsMakeNoRPC(t *testing.T) {
	block := func(hosts, cidrs []string) sandbox.NetworkPolicy {
		return sandbox.NetworkPolicy{AllowHosts: hosts, AllowCIDRs: cidrs}
	}
	cases := []struct {
		name   string
		spec   sandbox.Spec
		sni    bool
		reason string
	}{
		{"short lifetime", sandbox.Spec{Lifetime: 119 * time.Second}, false, "minimum"},
		{"host bits", sandbox.Spec{Network: block(nil, []string{"10.0.0.1/8"})}, false, "host bits"},
		{"whole internet", sandbox.Spec{Network: block(nil, []string{"0.0.0.0/0"})}, false, "whole internet"},
		{"hostname as cidr", sandbox.Spec{Network: block(nil, []string{"example.com"})}, false, "IPv4"},
		{"url as cidr", sandbox.Spec{Network: block(nil, []string{"https://10.0.0.0/8"})}, false, "IPv4"},
		{"ipv6", sandbox.Spec{Network: block(nil, []string{"2001:db8::/32"})}, false, "IPv6"},
		{"hosts without sni", sandbox.Spec{Network: block([]string{"example.com"}, nil)}, false, "egress_enforcement"},
		{"single label", sandbox.Spec{Network: block([]string{"localhost"}, nil)}, true, "single-label"},
		{"url as host", sandbox.Spec{Network: block([]string{"https://example.com/x"}, nil)}, true, "bare hostname"},
		{"inner wildcard", sandbox.Spec{Network: block([]string{"*.*.example.com"}, nil)}, true, "bare hostname"},
		{"port", sandbox.Spec{Network: block([]string{"example.com:443"}, nil)}, true, "bare hostname"},
		{"ip as host", sandbox.Spec{Network: block([]string{"10.0.0.1"}, nil)}, true, "allow_cidrs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake, drv := newFake(t, func(o *Options) {
				if tc.sni {
					o.EgressEnforcement = EgressSNI
				}
			})
			_, err := sandbox.NewBackend(drv).Create(context.Background(), tc.spec)
			if !errors.Is(err, sandbox.ErrRefused) || !sandbox.IsFinal(err) {
				t.Fatalf("want a terminal refusal, got %v", err)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("error %q does not explain %q", err, tc.reason)
			}
			for _, rpc := range []string{"AuthTokenGet", "AppGetOrCreate", "SandboxCreateV2", "SandboxCreate"} {
				if n := fake.Calls(rpc); n != 0 {
					t.Errorf("%s called %d times before the refusal", rpc, n)
				}
			}
		})
	}
}

func TestOwnershipTagContract(t *testing.T) {
	fake, drv := newFake(t, nil)
	before := time.Now().Unix()
	sb := mustCreate(t, drv, sandbox.Spec{
		Lifetime: 900 * time.Second, Owner: "my_dag/manual__2026-01-01",
		Tags: map[string]string{"team": "data", sandbox.TagOwner: "someone-else", sandbox.TagHolder: "x", sandbox.TagSandbox: "fake"},
	})
	defer sb.Destroy(context.Background())
	after := time.Now().Unix()
	tags := fake.Creates()[0].Tags
	name := fake.Creates()[0].Definition.GetName()
	exp, err := strconv.ParseInt(tags[sandbox.TagExpiresAt], 10, 64)
	if err != nil || exp < before+900 || exp > after+900 {
		t.Errorf("airflow_expires_at %q not create time + 900 s (%d..%d)", tags[sandbox.TagExpiresAt], before+900, after+900)
	}
	want := map[string]string{
		sandbox.TagOwner:   "my_dag/manual__2026-01-01",
		sandbox.TagSandbox: name,
		sandbox.TagNetwork: `{"allow_egress_to":[],"allow_egress_to_cidrs":[],"block_network":true}`,
		sandbox.TagWorkdir: "/workspace",
		"team":             "data",
	}
	for k, v := range want {
		if tags[k] != v {
			t.Errorf("tag %s = %q, want %q", k, tags[k], v)
		}
	}
	if _, ok := tags[sandbox.TagHolder]; ok {
		t.Error("a new sandbox must not carry airflow_holder")
	}
	// What a Python attach reads back through GetTags.
	got, err := sb.Tags(context.Background())
	if err != nil || got[sandbox.TagOwner] != want[sandbox.TagOwner] || got[sandbox.TagNetwork] != want[sandbox.TagNetwork] {
		t.Fatalf("GetTags: %v %v", got, err)
	}
}

// A caller that skips the portable layer gets no sandbox without the
// ownership tags, told what to call instead, and nothing reaches Modal.
func TestDirectCreateWithoutTagsIsRefused(t *testing.T) {
	fake, drv := newFake(t, nil)
	_, err := drv.Create(context.Background(), sandbox.NewName(), sandbox.Spec{}.WithDefaults())
	if !errors.Is(err, sandbox.ErrRefused) || !strings.Contains(err.Error(), "ownership tag airflow_sandbox is missing") ||
		!strings.Contains(err.Error(), "sandbox.NewBackend(driver).Create") {
		t.Fatalf("want a refusal naming the missing tag and the call to make, got %v", err)
	}
	if n := fake.Calls("SandboxCreateV2") + fake.Calls("SandboxCreate"); n != 0 {
		t.Fatalf("%d creates reached Modal", n)
	}
}

func TestAttachReleaseThroughSDK(t *testing.T) {
	fake, drv := newFake(t, nil)
	owner := sandbox.OwnerFor("d", "r")
	sb := mustCreate(t, drv, sandbox.Spec{Owner: owner, Lifetime: 600 * time.Second})
	if err := sb.WriteFile(context.Background(), "in.txt", strings.NewReader("staged"), 0); err != nil {
		t.Fatal(err)
	}
	// Another task: a fresh driver and SDK client that knows only the id.
	drv2, err := New(context.Background(), Options{Credentials: Credentials{TokenID: fake.TokenID(), TokenSecret: fake.TokenSecret()}})
	if err != nil {
		t.Fatal(err)
	}
	defer drv2.Close()
	holder := sandbox.HolderFor("d", "r", "agent", -1)
	att, a, err := sandbox.NewBackend(drv2).Attach(context.Background(), sb.ID(), owner, holder)
	if err != nil {
		t.Fatal(err)
	}
	if a.Workdir != "/workspace" || a.Network == nil || a.Network.Open || time.Until(a.ExpiresAt) < 9*time.Minute {
		t.Errorf("attachment %+v", a)
	}
	var out bytes.Buffer
	res, err := att.Exec(context.Background(), "cat in.txt", sandbox.ExecOptions{Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "staged" {
		t.Fatalf("exec after attach: %+v %v %q", res, err, out.String())
	}
	if res.AppliedTimeout > 10*time.Minute {
		t.Errorf("command budget %v not shortened to the sandbox's remaining life", res.AppliedTimeout)
	}
	if _, _, err := sandbox.NewBackend(drv2).Attach(context.Background(), sb.ID(), owner, holder+"x"); err == nil || !strings.Contains(err.Error(), "already held") {
		t.Fatalf("second holder: %v", err)
	}
	if _, _, err := sandbox.NewBackend(drv2).Attach(context.Background(), sb.ID(), "other/run", holder); err == nil || !strings.Contains(err.Error(), "not owned") {
		t.Fatalf("wrong owner: %v", err)
	}
	if err := sandbox.NewBackend(drv2).Release(context.Background(), sb.ID(), holder); err != nil {
		t.Fatal(err)
	}
	if tags, _ := drv.Tags(context.Background(), sb.ID()); tags[sandbox.TagHolder] != "" || tags[sandbox.TagOwner] != owner {
		t.Fatalf("after release: %v", tags)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := sandbox.NewBackend(drv2).Release(context.Background(), sb.ID(), holder); err != nil {
		t.Fatalf("release of a destroyed sandbox: %v", err)
	}
	assertNoLeak(t, fake)
}

func TestCredentialResolution(t *testing.T) {
	fake := fakemodal.Start(t, fakemodal.Options{})
	fake.SetEnv(t)
	good := Credentials{TokenID: fake.TokenID(), TokenSecret: fake.TokenSecret(), Source: "modal_default"}
	ping := func(creds Credentials) error {
		drv, err := New(context.Background(), Options{Credentials: creds})
		if err != nil {
			return err
		}
		defer drv.Close()
		_, err = drv.ListSandboxes(context.Background(), nil)
		return err
	}

	t.Run("connection tokens win over env", func(t *testing.T) {
		t.Setenv("MODAL_TOKEN_ID", "ak-wrong")
		t.Setenv("MODAL_TOKEN_SECRET", "as-wrong")
		if err := ping(good); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("no tokens uses env", func(t *testing.T) {
		if err := ping(Credentials{Source: "modal_default"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("bad env tokens are a terminal credential error", func(t *testing.T) {
		t.Setenv("MODAL_TOKEN_SECRET", "as-wrong")
		err := ping(Credentials{})
		if err == nil || sandbox.IsRetryable(err) || !errors.Is(err, sandbox.ErrRejected) || !strings.Contains(err.Error(), "modal connection") {
			t.Fatalf("want a final ErrRejected error pointing at the connection, got %v", err)
		}
		if strings.Contains(err.Error(), "as-wrong") {
			t.Fatal("error leaks the secret")
		}
	})
	t.Run("one token is an error", func(t *testing.T) {
		_, err := New(context.Background(), Options{Credentials: Credentials{TokenID: "ak-1", Source: "half"}})
		if err == nil || !strings.Contains(err.Error(), "half") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestMissingAppWithoutCreate(t *testing.T) {
	fake, drv := newFake(t, func(o *Options) { o.DisableCreateApp = true; o.AppName = "not-deployed" })
	_, err := sandbox.NewBackend(drv).Create(context.Background(), sandbox.Spec{})
	if err == nil || sandbox.IsRetryable(err) || !sandbox.IsFinal(err) || !strings.Contains(err.Error(), "not-deployed") {
		t.Fatalf("want a final error naming the app, got %v", err)
	}
	fake.AddApp("", "not-deployed")
	sb := mustCreate(t, drv, sandbox.Spec{})
	sb.Destroy(context.Background())
}

func TestExecTimeoutStdinAndLiveness(t *testing.T) {
	fake, drv := newFake(t, nil)
	sb := mustCreate(t, drv, sandbox.Spec{})
	ctx := context.Background()

	var out bytes.Buffer
	res, err := sb.Exec(ctx, "tr a-z A-Z", sandbox.ExecOptions{Stdin: strings.NewReader("shout"), Stdout: &out})
	if err != nil || out.String() != "SHOUT" {
		t.Fatalf("stdin: %+v %v %q", res, err, out.String())
	}

	res, err = sb.Exec(ctx, "echo before; sleep 30", sandbox.ExecOptions{Timeout: 1200 * time.Millisecond, Stdout: &out})
	if err != nil || !res.TimedOut || res.SandboxLost {
		t.Fatalf("timeout: %+v %v", res, err)
	}
	if res.AppliedTimeout != 2*time.Second {
		t.Errorf("applied timeout %v, want 1.2s rounded up to 2s", res.AppliedTimeout)
	}
	res, err = sb.Exec(ctx, "kill -9 $$", sandbox.ExecOptions{})
	if err != nil || res.ExitCode != 137 || res.TimedOut || res.SandboxLost {
		t.Fatalf("a command killed by a signal is neither a timeout nor a lost sandbox: %+v %v", res, err)
	}

	// The sandbox dies mid-command.
	go func() {
		eventually.Holds(t, func() bool { return fake.Calls("TaskExecStart") >= 4 })
		fake.KillSandbox(sb.ID())
	}()
	res, err = sb.Exec(ctx, "sleep 30", sandbox.ExecOptions{})
	if !res.SandboxLost {
		t.Fatalf("sandbox death not reported: %+v %v", res, err)
	}
	if _, err := sb.Exec(ctx, "true", sandbox.ExecOptions{}); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("exec on a dead sandbox: want ErrGone, got %v", err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatalf("destroying a dead sandbox: %v", err)
	}
	assertNoLeak(t, fake)
}

func TestRetryableFaults(t *testing.T) {
	fake, drv := newFake(t, nil)
	ctx := context.Background()

	// More Unavailable answers than the SDK's own three retries.
	fake.FailNext("SandboxCreateV2", 5, codes.Unavailable)
	sb := mustCreate(t, drv, sandbox.Spec{})
	if n := fake.Calls("SandboxCreateV2"); n != 6 {
		t.Errorf("SandboxCreateV2 called %d times, want 6", n)
	}
	if n := len(fake.Sandboxes()); n != 1 {
		t.Fatalf("%d sandboxes after retried create", n)
	}

	fake.FailNext("TaskExecStart", 12, codes.Unavailable)
	var out bytes.Buffer
	if res, err := sb.Exec(ctx, "echo ok", sandbox.ExecOptions{Stdout: &out}); err != nil || out.String() != "ok\n" {
		t.Fatalf("exec after start failures: %+v %v", res, err)
	}

	fake.DropStdioStreams(7, 4)
	out.Reset()
	if res, err := sb.Exec(ctx, "seq 1 2000", sandbox.ExecOptions{Stdout: &out}); err != nil || res.ExitCode != 0 || !strings.HasSuffix(out.String(), "\n1999\n2000\n") || !strings.HasPrefix(out.String(), "1\n2\n") {
		t.Fatalf("output across dropped streams: %+v %v (%d bytes)", res, err, out.Len())
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	assertNoLeak(t, fake)
}

func TestTerminalFaults(t *testing.T) {
	fake, drv := newFake(t, nil)
	fake.FailNext("SandboxCreateV2", 1, codes.PermissionDenied)
	_, err := sandbox.NewBackend(drv).Create(context.Background(), sandbox.Spec{})
	if err == nil || sandbox.IsRetryable(err) || !errors.Is(err, sandbox.ErrRejected) || !strings.Contains(err.Error(), "token") {
		t.Fatalf("want a final credential error, got %v", err)
	}
	if n := fake.Calls("SandboxCreateV2"); n != 1 {
		t.Errorf("a terminal error was retried: %d calls", n)
	}
	fake.FailNext("SandboxCreateV2", 100, codes.Unavailable)
	_, err = sandbox.NewBackend(drv).Create(context.Background(), sandbox.Spec{})
	if err == nil || !sandbox.IsRetryable(err) || sandbox.IsFinal(err) {
		t.Fatalf("want a retryable, not final, error once retries are spent, got %v", err)
	}
	assertNoLeak(t, fake)
}

func TestAmbiguousCreateNeverLeaks(t *testing.T) {
	fake, drv := newFake(t, nil)
	// Every SDK attempt of the first driver attempt creates the sandbox and
	// hears Unavailable; the driver's next attempt finds the name taken and
	// adopts that sandbox instead of making a second one.
	fake.FailAfterCreate(4)
	sb := mustCreate(t, drv, sandbox.Spec{})
	if live := fake.Sandboxes(); len(live) != 1 || live[0].ID != sb.ID() {
		t.Fatalf("want exactly the adopted sandbox, got %+v", live)
	}
	sb.Destroy(context.Background())
	assertNoLeak(t, fake)

	// A slow create abandoned by its caller is found by name and terminated.
	fake.SetCreateDelay(3 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := sandbox.NewBackend(drv).Create(ctx, sandbox.Spec{}); err == nil {
		t.Fatal("create should fail with its context")
	}
	assertNoLeak(t, fake)
}

func TestListSandboxesAndInfo(t *testing.T) {
	fake, drv := newFake(t, nil)
	ctx := context.Background()
	a := mustCreate(t, drv, sandbox.Spec{Tags: map[string]string{"job": "a"}, Workdir: "/srv"})
	b := mustCreate(t, drv, sandbox.Spec{Tags: map[string]string{"job": "b"}})
	list, err := drv.ListSandboxes(ctx, map[string]string{"job": "a"})
	if err != nil || len(list) != 1 || list[0].ID != a.ID() || list[0].Workdir != "/srv" || list[0].ExpiresAt.IsZero() {
		t.Fatalf("list: %+v %v", list, err)
	}
	info, err := drv.Info(ctx, b.ID())
	if err != nil || info.Workdir != "/workspace" || info.Name == "" || time.Until(info.ExpiresAt) < 50*time.Minute {
		t.Fatalf("info: %+v %v", info, err)
	}
	a.Destroy(ctx)
	b.Destroy(ctx)
	if err := b.Destroy(ctx); err != nil {
		t.Fatalf("second destroy: %v", err)
	}
	if _, err := drv.Info(ctx, b.ID()); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("info after destroy: %v", err)
	}
	assertNoLeak(t, fake)
}

func TestFileErrorsAndLimits(t *testing.T) {
	_, drv := newFake(t, nil)
	sb := mustCreate(t, drv, sandbox.Spec{})
	defer sb.Destroy(context.Background())
	ctx := context.Background()
	if err := sb.WriteFile(ctx, "d/f.txt", strings.NewReader("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sb.OpenFile(ctx, "d/f.txt", 5); !errors.Is(err, sandbox.ErrTooLarge) {
		t.Fatalf("want ErrTooLarge, got %v", err)
	} else if te := new(sandbox.TooLargeError); errors.As(err, &te) && te.Size != 10 {
		t.Errorf("TooLargeError size %d, want 10", te.Size)
	}
	rc, size, err := sb.OpenFile(ctx, "d/f.txt", 10)
	if err != nil || size != 10 {
		t.Fatalf("open: %d %v", size, err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(data) != "0123456789" {
		t.Fatalf("read %q %v", data, err)
	}
	fi, err := sb.Stat(ctx, "d/f.txt")
	if err != nil || fi.Mode.Perm() != 0o600 || !fi.IsRegular() || fi.Size != 10 {
		t.Fatalf("stat: %+v %v", fi, err)
	}
	if err := sb.WriteFile(ctx, "d", strings.NewReader("x"), 0); !errors.Is(err, sandbox.ErrIsDir) {
		t.Fatalf("writing over a directory: %v", err)
	}
	failing := io.MultiReader(strings.NewReader("partial"), errReader{})
	if err := sb.WriteFile(ctx, "d/f.txt", failing, 0); err == nil {
		t.Fatal("a failing source must fail the write")
	}
	rc, _, err = sb.OpenFile(ctx, "d/f.txt", -1)
	if err != nil {
		t.Fatal(err)
	}
	data, _ = io.ReadAll(rc)
	rc.Close()
	if string(data) != "0123456789" {
		t.Fatalf("a failed write changed the file to %q", data)
	}
	list, err := sb.List(ctx, "d")
	if err != nil || len(list) != 1 || list[0].Name != "f.txt" {
		t.Fatalf("no temporary upload may remain: %+v %v", list, err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("source broke") }

func TestExecCancelAndPerCommandOptions(t *testing.T) {
	fake, drv := newFake(t, nil)
	sb := mustCreate(t, drv, sandbox.Spec{Env: map[string]string{"A": "sandbox"}})
	defer func() { sb.Destroy(context.Background()); assertNoLeak(t, fake) }()
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), `mkdir -p /workspace/sub && cd /workspace/sub && true; echo "$A $B $(pwd)"`,
		sandbox.ExecOptions{Env: map[string]string{"B": "cmd"}, Stdout: &out})
	if err != nil || out.String() != "sandbox cmd /workspace/sub\n" {
		t.Fatalf("env: %+v %v %q", res, err, out.String())
	}
	out.Reset()
	if _, err := sb.Exec(context.Background(), "pwd", sandbox.ExecOptions{Workdir: "sub", Stdout: &out}); err != nil || out.String() != "/workspace/sub\n" {
		t.Fatalf("workdir: %v %q", err, out.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	go func() {
		eventually.Holds(t, func() bool { return fake.Calls("TaskExecStart") >= 3 })
		close(started)
		cancel()
	}()
	// An exec that ignored the cancellation would end with the sleep, and
	// no error.
	_, err = sb.Exec(ctx, "sleep 60", sandbox.ExecOptions{})
	<-started
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want the context's error, got %v", err)
	}
}

func TestNoStdinMeansEmptyStdin(t *testing.T) {
	_, drv := newFake(t, nil)
	sb := mustCreate(t, drv, sandbox.Spec{})
	defer sb.Destroy(context.Background())
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), `cat; echo "end:$0"; exit 4`, sandbox.ExecOptions{Timeout: 20 * time.Second, Stdout: &out})
	if err != nil || res.TimedOut || res.ExitCode != 4 || out.String() != "end:sh\n" {
		t.Fatalf("a command reading stdin must see EOF at once: %+v %v %q", res, err, out.String())
	}
}

func TestSecretsStayOutOfLogsAndErrors(t *testing.T) {
	const secret = "as-do-not-print-me"
	var logs bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace})
	fake := fakemodal.Start(t, fakemodal.Options{TokenSecret: secret})
	fake.SetEnv(t)
	drv, err := New(context.Background(), Options{Logger: log, RetryDelay: 10e6,
		Credentials: Credentials{TokenID: fake.TokenID(), TokenSecret: secret, Source: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	sb := mustCreate(t, drv, sandbox.Spec{Env: map[string]string{"TOKEN": "env-value"}})
	sb.Exec(context.Background(), "true", sandbox.ExecOptions{})
	fake.FailNext("SandboxCreateV2", 20, codes.Unavailable) // retried and logged
	_, createErr := sandbox.NewBackend(drv).Create(context.Background(), sandbox.Spec{})
	sb.Destroy(context.Background())

	bad, err := New(context.Background(), Options{Logger: log,
		Credentials: Credentials{TokenID: fake.TokenID(), TokenSecret: secret + "-wrong", Source: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, authErr := bad.ListSandboxes(context.Background(), nil)
	if createErr == nil || authErr == nil {
		t.Fatalf("want both failures, got %v / %v", createErr, authErr)
	}
	if !strings.Contains(logs.String(), "retrying") {
		t.Fatalf("the test should exercise logging; got %q", logs.String())
	}
	for _, s := range []string{logs.String(), createErr.Error(), authErr.Error(), drv.opts.Credentials.String()} {
		if strings.Contains(s, secret) {
			t.Fatalf("secret leaked into %q", s)
		}
	}
}
