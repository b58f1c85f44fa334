package fakemodal

import (
	"context"
	"maps"
	"sort"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/airflow-sandbox/airflow-go-worker/sandbox"
)

// fakeSandbox is one sandbox; its commands run in the exec driver's
// sandbox execID.
type fakeSandbox struct {
	id, taskID, name, appID string
	execID                  string // the exec driver's sandbox id
	created                 time.Time
	timeout                 time.Duration
	workdir                 string
	env                     map[string]string

	// guarded by Server.mu
	tags   map[string]string
	execs  map[string]*fakeExec
	result *pb.GenericResult
	timer  *time.Timer

	done      chan struct{} // closed when the sandbox has finished
	destroyed chan struct{} // closed once its files and processes are gone
	ctx       context.Context
	stop      context.CancelFunc // kills running commands
}

func (sb *fakeSandbox) isDone() bool {
	select {
	case <-sb.done:
		return true
	default:
		return false
	}
}

func (sb *fakeSandbox) info() SandboxInfo {
	return SandboxInfo{ID: sb.id, Name: sb.name, AppID: sb.appID, TaskID: sb.taskID,
		Tags: maps.Clone(sb.tags), CreatedAt: sb.created, Timeout: sb.timeout}
}

const imageBuilderVersion = "2025.06"

type control struct {
	pb.UnimplementedModalClientServer
	s *Server
}

// ClientHello is what the Python client's Client.hello() and
// Client.verify() send (the Modal provider's test_connection uses them).
func (c *control) ClientHello(ctx context.Context, _ *emptypb.Empty) (*pb.ClientHelloResponse, error) {
	return pb.ClientHelloResponse_builder{ImageBuilderVersion: imageBuilderVersion}.Build(), nil
}

func (c *control) AuthTokenGet(ctx context.Context, _ *pb.AuthTokenGetRequest) (*pb.AuthTokenGetResponse, error) {
	return pb.AuthTokenGetResponse_builder{Token: c.s.authJWT}.Build(), nil
}

func (c *control) AppGetOrCreate(ctx context.Context, req *pb.AppGetOrCreateRequest) (*pb.AppGetOrCreateResponse, error) {
	key := req.GetEnvironmentName() + "/" + req.GetAppName()
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	id, ok := c.s.apps[key]
	if !ok {
		if req.GetObjectCreationType() != pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING {
			return nil, status.Errorf(codes.NotFound, "App '%s' not found in environment '%s'", req.GetAppName(), req.GetEnvironmentName())
		}
		id = newObjectID("ap")
		c.s.apps[key] = id
	}
	return pb.AppGetOrCreateResponse_builder{AppId: id}.Build(), nil
}

// AddApp creates an app, for tests of the no-create-if-missing path.
func (s *Server) AddApp(environment, name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := environment + "/" + name
	if id, ok := s.apps[key]; ok {
		return id
	}
	id := newObjectID("ap")
	s.apps[key] = id
	return id
}

func (c *control) EnvironmentGetOrCreate(ctx context.Context, req *pb.EnvironmentGetOrCreateRequest) (*pb.EnvironmentGetOrCreateResponse, error) {
	return pb.EnvironmentGetOrCreateResponse_builder{
		EnvironmentId: "en-fake",
		Metadata: pb.EnvironmentMetadata_builder{
			Name:     req.GetDeploymentName(),
			Settings: pb.EnvironmentSettings_builder{ImageBuilderVersion: imageBuilderVersion}.Build(),
		}.Build(),
	}.Build(), nil
}

func (c *control) ImageGetOrCreate(ctx context.Context, req *pb.ImageGetOrCreateRequest) (*pb.ImageGetOrCreateResponse, error) {
	return pb.ImageGetOrCreateResponse_builder{
		ImageId: newObjectID("im"),
		Result:  pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}.Build(),
	}.Build(), nil
}

func (c *control) SecretGetOrCreate(ctx context.Context, req *pb.SecretGetOrCreateRequest) (*pb.SecretGetOrCreateResponse, error) {
	id := newObjectID("st")
	c.s.mu.Lock()
	c.s.secretEnv(id, req.GetEnvDict())
	c.s.mu.Unlock()
	return pb.SecretGetOrCreateResponse_builder{SecretId: id}.Build(), nil
}

func (s *Server) secretEnv(id string, env map[string]string) {
	if s.secrets == nil {
		s.secrets = map[string]map[string]string{}
	}
	s.secrets[id] = maps.Clone(env)
}

func (c *control) SandboxCreateV2(ctx context.Context, req *pb.SandboxCreateV2Request) (*pb.SandboxCreateV2Response, error) {
	env := map[string]string{}
	for _, src := range req.GetSecretSources() {
		maps.Copy(env, src.GetEnv().GetContents())
	}
	sb, err := c.s.create(ctx, true, req.GetAppId(), req.GetDefinition(), req.GetTags(), env)
	if err != nil {
		return nil, err
	}
	return pb.SandboxCreateV2Response_builder{
		SandboxId: sb.id, TaskId: sb.taskID,
		CommandRouterAccess: pb.CommandRouterAccess_builder{Url: "https://" + c.s.addr, Jwt: c.s.routerJWT}.Build(),
	}.Build(), nil
}

// SandboxCreate is the V1 path the SDK takes for GPU sandboxes.
func (c *control) SandboxCreate(ctx context.Context, req *pb.SandboxCreateRequest) (*pb.SandboxCreateResponse, error) {
	env := map[string]string{}
	c.s.mu.Lock()
	for _, id := range req.GetDefinition().GetSecretIds() {
		maps.Copy(env, c.s.secrets[id])
	}
	c.s.mu.Unlock()
	sb, err := c.s.create(ctx, false, req.GetAppId(), req.GetDefinition(), req.GetTags(), env)
	if err != nil {
		return nil, err
	}
	return pb.SandboxCreateResponse_builder{SandboxId: sb.id}.Build(), nil
}

// create makes a sandbox for either RPC version: admit the call (a retry
// of a create that happened, a name taken, a server closing), start the
// exec driver's sandbox behind it, register it, and answer as the test
// asked (held, delayed, or failing after the sandbox exists).
func (s *Server) create(ctx context.Context, v2 bool, appID string, def *pb.Sandbox, tagList []*pb.SandboxTag, env map[string]string) (*fakeSandbox, error) {
	req := newCreateReq(ctx, v2, appID, def, tagList, env)
	prev, plan, err := s.admitCreate(req)
	if err != nil || prev != nil {
		return prev, err
	}
	defer s.work.Done()
	sb, err := s.startSandbox(ctx, req, plan)
	if err != nil {
		return nil, err
	}
	hold, err := s.register(sb, req)
	if err != nil {
		return nil, err
	}
	if err := s.answerCreate(ctx, sb.id, hold, plan); err != nil {
		return nil, err
	}
	return sb, nil
}

// createReq is one create call, as both RPC versions give it.
type createReq struct {
	v2      bool
	appID   string
	def     *pb.Sandbox
	tags    map[string]string
	env     map[string]string
	timeout time.Duration // the sandbox's lifetime: 300 s unless the definition sets one
	key     string        // the idempotency key, "" without one
}

func newCreateReq(ctx context.Context, v2 bool, appID string, def *pb.Sandbox, tagList []*pb.SandboxTag, env map[string]string) createReq {
	tags := map[string]string{}
	for _, t := range tagList {
		tags[t.GetTagName()] = t.GetTagValue()
	}
	timeout := time.Duration(def.GetTimeoutSecs()) * time.Second
	if timeout == 0 {
		timeout = 300 * time.Second
	}
	return createReq{v2: v2, appID: appID, def: def, tags: tags, env: env, timeout: timeout, key: idempotencyKey(ctx)}
}

// createPlan is what admitting a create decided: the new sandbox's ids and
// the faults the test set for it.
type createPlan struct {
	id, taskID string
	delay      time.Duration
	failAfter  bool
}

// errFailedAfterCreate is FailAfterCreate's answer: the sandbox exists, the
// caller hears Unavailable.
var errFailedAfterCreate = status.Error(codes.Unavailable, "fakemodal: injected Unavailable after the sandbox was created")

// admitCreate answers a retried create with the sandbox it made (prev),
// refuses a running sandbox's name in the same app and a closing server,
// and otherwise plans the new sandbox, counting it as work Close waits
// for (the caller owes s.work.Done).
func (s *Server) admitCreate(req createReq) (prev *fakeSandbox, plan createPlan, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev := s.idempotent[req.key]; req.key != "" && prev != nil {
		// A retry of a create that already happened: Modal answers with
		// the same sandbox rather than making a second one.
		if s.failAfterCreate > 0 {
			s.failAfterCreate--
			return nil, plan, errFailedAfterCreate
		}
		return prev, plan, nil
	}
	if name := req.def.GetName(); name != "" {
		for _, other := range s.sandboxes {
			if other.appID == req.appID && other.name == name && !other.isDone() {
				return nil, plan, status.Errorf(codes.AlreadyExists, "a running sandbox named %q already exists in this app", name)
			}
		}
	}
	if s.closed {
		return nil, plan, errShuttingDown
	}
	plan = createPlan{id: newV1SandboxID(), taskID: newV1TaskID(), delay: s.createDelay}
	if req.v2 {
		plan.id, plan.taskID = newV2SandboxID(), newV2TaskID()
	}
	if s.failAfterCreate > 0 {
		s.failAfterCreate--
		plan.failAfter = true
	}
	s.work.Add(1)
	return nil, plan, nil
}

// startSandbox creates the exec driver's sandbox, which holds the files
// and runs the commands. Network: anything other than OPEN is run with no
// network at all, which is at least as strict as the allowlist asked for.
func (s *Server) startSandbox(ctx context.Context, req createReq, plan createPlan) (*fakeSandbox, error) {
	spec := sandbox.Spec{
		Lifetime: req.timeout, Workdir: req.def.GetWorkdir(), Env: req.env,
		Network: sandbox.NetworkPolicy{Open: req.def.GetNetworkAccess().GetNetworkAccessType() == pb.NetworkAccess_OPEN},
	}.WithDefaults()
	info, err := s.exec.Create(context.WithoutCancel(ctx), sandbox.NewName(), spec)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "fakemodal: cannot start the sandbox's process environment: %v", err)
	}
	sbCtx, stop := context.WithCancel(context.Background())
	return &fakeSandbox{
		id: plan.id, taskID: plan.taskID, name: req.def.GetName(), appID: req.appID,
		execID: info.ID, created: s.createdAt(), timeout: req.timeout, workdir: spec.Workdir, env: req.env,
		tags: req.tags, execs: map[string]*fakeExec{}, done: make(chan struct{}), destroyed: make(chan struct{}), ctx: sbCtx, stop: stop,
	}, nil
}

// register lists the sandbox (by id, task and idempotency key), records
// the create, starts its lifetime, and returns the hold the create must
// wait on (nil when none). A create that lost the race with Close is
// undone.
func (s *Server) register(sb *fakeSandbox, req createReq) (hold chan struct{}, err error) {
	s.mu.Lock()
	if s.closed { // Close has taken its list of sandboxes to destroy
		s.mu.Unlock()
		sb.stop()
		if err := s.exec.Destroy(context.Background(), sb.execID); err != nil {
			s.log.Warn("destroying the exec sandbox of a create that lost the race with Close failed", "error", err)
		}
		return nil, errShuttingDown
	}
	defer s.mu.Unlock()
	s.sandboxes[sb.id] = sb
	s.byTask[sb.taskID] = sb
	if req.key != "" {
		s.idempotent[req.key] = sb
	}
	rec := CreateRecord{SandboxID: sb.id, V2: req.v2, AppID: req.appID, Definition: req.def, Tags: maps.Clone(req.tags), Env: maps.Clone(req.env)}
	s.creates = append(s.creates, rec)
	sb.timer = time.AfterFunc(req.timeout, func() { s.finish(sb, pb.GenericResult_GENERIC_STATUS_TIMEOUT, 0) })
	if s.hold != nil {
		s.held[sb.id] = rec
	}
	return s.hold, nil
}

// answerCreate waits while the test holds creates (HoldCreates) or delays
// them, then fails the call if the test asked for that.
func (s *Server) answerCreate(ctx context.Context, id string, hold chan struct{}, plan createPlan) error {
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
		}
		s.mu.Lock()
		delete(s.held, id)
		s.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return status.FromContextError(err).Err()
		}
	}
	if plan.delay > 0 {
		select {
		case <-time.After(plan.delay):
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	if plan.failAfter {
		return errFailedAfterCreate
	}
	return nil
}

// finish ends a sandbox once: records the result, kills its commands and
// destroys its files.
func (s *Server) finish(sb *fakeSandbox, st pb.GenericResult_GenericStatus, code int32) {
	if s.end(sb, st, code) {
		s.teardown(sb)
	}
}

// end records the sandbox's result, unless it has one already; from then on
// every RPC and Sandboxes() see it finished. It reports whether this call
// ended it (the caller then owes the teardown).
func (s *Server) end(sb *fakeSandbox, st pb.GenericResult_GenericStatus, code int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb.result != nil {
		return false
	}
	sb.result = pb.GenericResult_builder{Status: st, Exitcode: code}.Build()
	if sb.timer != nil {
		sb.timer.Stop()
	}
	close(sb.done)
	return true
}

// teardown kills an ended sandbox's commands and destroys its files.
func (s *Server) teardown(sb *fakeSandbox) {
	sb.stop()
	if err := s.exec.Destroy(context.Background(), sb.execID); err != nil {
		s.log.Warn("destroying the exec sandbox failed", "sandbox", sb.id, "error", err)
	}
	close(sb.destroyed)
}

func (s *Server) lookup(id string) (*fakeSandbox, error) {
	if !wellFormedSandboxID(id) {
		return nil, status.Errorf(codes.InvalidArgument, "%q is not a Modal sandbox id (sb- followed by 22 base62 characters, or by a 26-character ULID)", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	if sb == nil {
		return nil, status.Errorf(codes.NotFound, "Sandbox %s not found", id)
	}
	return sb, nil
}

func (c *control) SandboxGetTaskIdV2(ctx context.Context, req *pb.SandboxGetTaskIdRequest) (*pb.SandboxGetTaskIdResponse, error) {
	return c.getTaskID(req)
}

func (c *control) SandboxGetTaskId(ctx context.Context, req *pb.SandboxGetTaskIdRequest) (*pb.SandboxGetTaskIdResponse, error) {
	return c.getTaskID(req)
}

func (c *control) getTaskID(req *pb.SandboxGetTaskIdRequest) (*pb.SandboxGetTaskIdResponse, error) {
	sb, err := c.s.lookup(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if sb.result != nil {
		return pb.SandboxGetTaskIdResponse_builder{TaskResult: sb.result}.Build(), nil
	}
	return pb.SandboxGetTaskIdResponse_builder{TaskId: &sb.taskID}.Build(), nil
}

func (c *control) SandboxGetCommandRouterAccess(ctx context.Context, req *pb.SandboxGetCommandRouterAccessRequest) (*pb.SandboxGetCommandRouterAccessResponse, error) {
	if _, err := c.s.lookup(req.GetSandboxId()); err != nil {
		return nil, err
	}
	return pb.SandboxGetCommandRouterAccessResponse_builder{Url: "https://" + c.s.addr, Jwt: c.s.routerJWT}.Build(), nil
}

func (c *control) TaskGetCommandRouterAccess(ctx context.Context, req *pb.TaskGetCommandRouterAccessRequest) (*pb.TaskGetCommandRouterAccessResponse, error) {
	c.s.mu.Lock()
	sb := c.s.byTask[req.GetTaskId()]
	c.s.mu.Unlock()
	if sb == nil {
		return nil, status.Errorf(codes.NotFound, "task %s not found", req.GetTaskId())
	}
	return pb.TaskGetCommandRouterAccessResponse_builder{Url: "https://" + c.s.addr, Jwt: c.s.routerJWT}.Build(), nil
}

func (c *control) SandboxTerminateV2(ctx context.Context, req *pb.SandboxTerminateRequest) (*pb.SandboxTerminateResponse, error) {
	return c.terminate(req)
}

func (c *control) SandboxTerminate(ctx context.Context, req *pb.SandboxTerminateRequest) (*pb.SandboxTerminateResponse, error) {
	return c.terminate(req)
}

func (c *control) terminate(req *pb.SandboxTerminateRequest) (*pb.SandboxTerminateResponse, error) {
	sb, err := c.s.lookup(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	// Modal answers at once and stops the sandbox in the background (real
	// Modal may show the exit status only later). The fake records the
	// sandbox terminated before it answers, so what the client does next
	// (wait, exec, a test's leak check) sees it finished however late the
	// teardown goroutine gets to run.
	if c.s.end(sb, pb.GenericResult_GENERIC_STATUS_TERMINATED, 0) {
		go c.s.teardown(sb)
	}
	return &pb.SandboxTerminateResponse{}, nil
}

func (c *control) SandboxWaitV2(ctx context.Context, req *pb.SandboxWaitRequest) (*pb.SandboxWaitResponse, error) {
	return c.wait(ctx, req)
}

func (c *control) SandboxWait(ctx context.Context, req *pb.SandboxWaitRequest) (*pb.SandboxWaitResponse, error) {
	return c.wait(ctx, req)
}

func (c *control) wait(ctx context.Context, req *pb.SandboxWaitRequest) (*pb.SandboxWaitResponse, error) {
	sb, err := c.s.lookup(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if t := req.GetTimeout(); t > 0 {
		timer := time.NewTimer(time.Duration(float64(t) * float64(time.Second)))
		defer timer.Stop()
		select {
		case <-sb.done:
		case <-timer.C:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	meta := pb.SandboxHandleMetadata_builder{AppId: sb.appID}.Build()
	return pb.SandboxWaitResponse_builder{Result: sb.result, Metadata: meta}.Build(), nil
}

func (c *control) SandboxTagsSetV2(ctx context.Context, req *pb.SandboxTagsSetRequest) (*emptypb.Empty, error) {
	sb, err := c.s.lookup(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	tags := map[string]string{}
	for _, t := range req.GetTags() {
		tags[t.GetTagName()] = t.GetTagValue()
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if sb.result != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "Sandbox %s has finished", sb.id)
	}
	sb.tags = tags
	return &emptypb.Empty{}, nil
}

func (c *control) SandboxTagsGetV2(ctx context.Context, req *pb.SandboxTagsGetRequest) (*pb.SandboxTagsGetResponse, error) {
	sb, err := c.s.lookup(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return pb.SandboxTagsGetResponse_builder{Tags: tagList(sb.tags)}.Build(), nil
}

func tagList(tags map[string]string) []*pb.SandboxTag {
	out := make([]*pb.SandboxTag, 0, len(tags))
	for k, v := range tags {
		out = append(out, pb.SandboxTag_builder{TagName: k, TagValue: v}.Build())
	}
	return out
}

// listPage is small so that tests exercise paging.
const listPage = 25

// SandboxList is the classic listing the Python client uses when
// sandbox_v2 is off; it answers like SandboxListV2.
func (c *control) SandboxList(ctx context.Context, req *pb.SandboxListRequest) (*pb.SandboxListResponse, error) {
	return c.SandboxListV2(ctx, req)
}

func (c *control) SandboxListV2(ctx context.Context, req *pb.SandboxListRequest) (*pb.SandboxListResponse, error) {
	want := map[string]string{}
	for _, t := range req.GetTags() {
		want[t.GetTagName()] = t.GetTagValue()
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	var match []*fakeSandbox
	for _, sb := range c.s.sandboxes {
		if req.GetAppId() != "" && sb.appID != req.GetAppId() {
			continue
		}
		if !req.GetIncludeFinished() && sb.result != nil {
			continue
		}
		if b := req.GetBeforeTimestamp(); b > 0 && !(unixFloat(sb.created) < b) {
			continue
		}
		ok := true
		for k, v := range want {
			if got, has := sb.tags[k]; !has || got != v {
				ok = false
				break
			}
		}
		if ok {
			match = append(match, sb)
		}
	}
	// Newest first, as Modal pages backwards in time.
	sortNewestFirst(match)
	if len(match) > listPage {
		match = match[:listPage]
	}
	out := make([]*pb.SandboxInfo, 0, len(match))
	for _, sb := range match {
		out = append(out, pb.SandboxInfo_builder{
			Id: sb.id, CreatedAt: unixFloat(sb.created), AppId: sb.appID, Name: sb.name,
			Tags: tagList(sb.tags), TimeoutSecs: uint32(sb.timeout / time.Second),
		}.Build())
	}
	return pb.SandboxListResponse_builder{Sandboxes: out}.Build(), nil
}

func (c *control) SandboxGetFromNameV2(ctx context.Context, req *pb.SandboxGetFromNameRequest) (*pb.SandboxGetFromNameResponse, error) {
	return c.getFromName(req)
}

func (c *control) SandboxGetFromName(ctx context.Context, req *pb.SandboxGetFromNameRequest) (*pb.SandboxGetFromNameResponse, error) {
	return c.getFromName(req)
}

func (c *control) getFromName(req *pb.SandboxGetFromNameRequest) (*pb.SandboxGetFromNameResponse, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	appID := c.s.apps[req.GetEnvironmentName()+"/"+req.GetAppName()]
	var best *fakeSandbox
	for _, sb := range c.s.sandboxes {
		if sb.appID != appID || sb.name != req.GetSandboxName() {
			continue
		}
		if sb.result != nil && !req.GetIncludeTerminated() {
			continue
		}
		if best == nil || sb.created.After(best.created) {
			best = sb
		}
	}
	if appID == "" || best == nil {
		return nil, status.Errorf(codes.NotFound, "Sandbox with name '%s' not found in app '%s'", req.GetSandboxName(), req.GetAppName())
	}
	return pb.SandboxGetFromNameResponse_builder{SandboxId: best.id}.Build(), nil
}

// createdAt hands out strictly increasing creation times, a microsecond
// apart at least, so before_timestamp paging never skips a sandbox.
func (s *Server) createdAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if min := s.lastCreated.Add(time.Microsecond); now.Before(min) {
		now = min
	}
	s.lastCreated = now
	return now
}

func sortNewestFirst(sbs []*fakeSandbox) {
	sort.Slice(sbs, func(i, j int) bool { return sbs[i].created.After(sbs[j].created) })
}

func idempotencyKey(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-idempotency-key"); len(v) > 0 {
		return v[0]
	}
	return ""
}

func unixFloat(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// SandboxTagsSet and SandboxTagsGet serve V1-shaped (GPU) sandboxes.
func (c *control) SandboxTagsSet(ctx context.Context, req *pb.SandboxTagsSetRequest) (*emptypb.Empty, error) {
	return c.SandboxTagsSetV2(ctx, req)
}

func (c *control) SandboxTagsGet(ctx context.Context, req *pb.SandboxTagsGetRequest) (*pb.SandboxTagsGetResponse, error) {
	return c.SandboxTagsGetV2(ctx, req)
}
