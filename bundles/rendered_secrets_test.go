package bundles

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// convertInput is the probe's: a conversion whose staged object a run's
// conf names, and which declares the connection it reads.
type convertInput struct {
	StageIn map[string]string `json:"stage_in"`
	Env     map[string]string `json:"env"`
	ConnID  string            `json:"conn_id"`
}

func (in convertInput) ConnectionIDs() []string { return []string{in.ConnID} }

// connReply answers GetConnection for db with password, and nothing else.
func connReply(password string) replyFunc {
	return func(m protocol.Message) (map[string]any, map[string]any) {
		if m.Type() == protocol.TypeGetConnection && m.Body["conn_id"] == "db" {
			return map[string]any{"type": "ConnectionResult", "conn_id": "db", "conn_type": "postgres", "password": password,
				"extra": `{"region_name": "eu-west-1", "session_token": "XTRA-SESSION-T0KEN"}`}, nil
		}
		return nil, nil
	}
}

// reported is everything the bundle sent Airflow about the task's
// inputs: the SetRenderedMapIndex requests, the rendered fields, the
// terminal frame's rendered_map_index.
func reported(t *testing.T, s session) string {
	t.Helper()
	var b strings.Builder
	sawIndex := false
	for _, m := range s.requests {
		if m.Type() == protocol.TypeSetRenderedMapIndex {
			sawIndex = true
			fmt.Fprintf(&b, "SetRenderedMapIndex %v\n", m.Body["rendered_map_index"])
		}
	}
	if !sawIndex || len(s.rendered) == 0 || s.terminal == nil || s.terminal.Body["rendered_map_index"] == nil {
		t.Fatalf("the bundle reported no map index or no rendered fields (requests %v, rendered %v, terminal %v): nothing to check", s.requests, s.rendered, s.terminal)
	}
	for _, m := range s.rendered {
		fmt.Fprintf(&b, "SetRenderedFields %v\n", m.Body["rendered_fields"])
	}
	fmt.Fprintf(&b, "%s %v", s.terminal.Type(), s.terminal.Body["rendered_map_index"])
	return b.String()
}

// Issue 38, item 1: the probe's Dag cv, task convert, with
// map_index "{stage_in[in/data.csv]}|{env[TOK]}" and stage_in[in/data.csv]
// bound to {param: src}. A URL's credentials, a presigned URL's signature,
// an Azure SAS signature and a connection's password reached Airflow's UI
// and database through the rendered map index (and the password through
// the rendered fields too, sent before the task read its connection), on
// success and on failure. Before the fix the map index carried each whole.
func TestRenderedMapIndexAndFieldsHideEverySecret(t *testing.T) {
	const password = "PASSW0RD-db-9137"
	cases := map[string]struct {
		src    string
		secret []string
	}{
		"URL userinfo":        {"s3://AKIAX:PASSW0RD@bucket/k.csv", []string{"AKIAX", "PASSW0RD@"}},
		"X-Amz-Signature":     {"https://bucket.s3.amazonaws.com/k.csv?X-Amz-Credential=AKIAQ2%2F20261201&X-Amz-Signature=5f1e0c9a77bd", []string{"AKIAQ2", "5f1e0c9a77bd"}},
		"Azure SAS":           {"https://acct.blob.core.windows.net/c/k.csv?sv=2024-11-04&sig=Zm9vYmFyc2ln%3D", []string{"Zm9vYmFyc2ln"}},
		"connection password": {"s3://bucket/" + password + "/k.csv", []string{password}},
		"connection extra":    {"s3://bucket/XTRA-SESSION-T0KEN/k.csv", []string{"XTRA-SESSION-T0KEN"}},
	}
	for name, c := range cases {
		for _, fail := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/failing=%v", name, fail), func(t *testing.T) {
				s := runOne(t, func(ctx context.Context, in convertInput) error {
					if fail {
						return FailNoRetry(errors.New("conversion failed"))
					}
					return nil
				}, func(sd *protocol.StartupDetails) {
					sd.DagRun.Conf = map[string]any{"src": c.src}
				}, connReply(password),
					WithParam("stage_in[in/data.csv]", "src"), WithDefaults(map[string]any{"conn_id": "db", "env": map[string]any{"TOK": "x"}}),
					WithMapIndexTemplate("{stage_in[in/data.csv]}|{env[TOK]}"))
				wantState := protocol.TypeSucceedTask
				if fail {
					wantState = protocol.TypeTaskState
				}
				if s.terminal.Type() != wantState {
					t.Fatalf("the task ended %s, want %s: %v", s.terminal.Type(), wantState, s.terminal.Body)
				}
				all := reported(t, s)
				for _, secret := range c.secret {
					if strings.Contains(all, secret) {
						t.Errorf("%q reached Airflow:\n%s", secret, all)
					}
				}
				if !strings.Contains(all, "k.csv") || !strings.Contains(all, "|x") {
					t.Errorf("the map index should still name the object: %s", all)
				}
			})
		}
	}
}

// A connection the task reads only while it runs (its input declares
// none) is masked in what ends the try: the terminal frame's map index,
// and the rendered fields, sent again.
func TestSecretsLearnedWhileRunningAreMaskedWhenTheTaskEnds(t *testing.T) {
	type in struct {
		Object string `json:"object"`
	}
	const password = "LATE-PASSW0RD-4242"
	s := runOne(t, func(ctx context.Context, c Client, in in) error {
		if _, err := c.GetConnection(ctx, "db"); err != nil {
			return err
		}
		return errors.New("failed")
	}, func(sd *protocol.StartupDetails) {
		sd.DagRun.Conf = map[string]any{"object": "s3://bucket/" + password}
	}, connReply(password), WithParam("object", "object"), WithMapIndexTemplate("{object}"))
	if len(s.rendered) != 2 {
		t.Fatalf("want the rendered fields sent again once the password is known, got %d sends", len(s.rendered))
	}
	if got := fmt.Sprint(s.rendered[1].Body["rendered_fields"]); strings.Contains(got, password) || !strings.Contains(got, "s3://bucket/***") {
		t.Errorf("the rendered fields sent last show %s", got)
	}
	if got := s.terminal.Body["rendered_map_index"]; got != "s3://bucket/***" {
		t.Errorf("the terminal frame's map index is %v", got)
	}
}

// An input whose connection cannot be read (not a missing one: an error)
// is not reported at all: its secrets are unknown.
func TestInputsAreNotReportedWhenADeclaredConnectionCannotBeRead(t *testing.T) {
	s := runOne(t, func(in convertInput) error { return nil }, nil,
		func(m protocol.Message) (map[string]any, map[string]any) {
			if m.Type() == protocol.TypeGetConnection {
				return nil, map[string]any{"error": "API_SERVER_ERROR", "detail": map[string]any{"status_code": 500}}
			}
			return nil, nil
		}, WithDefaults(map[string]any{"conn_id": "db"}), WithMapIndexTemplate("{conn_id}"))
	asked := false
	for _, m := range s.requests {
		asked = asked || m.Type() == protocol.TypeGetConnection
		if m.Type() == protocol.TypeSetRenderedMapIndex {
			t.Errorf("a map index was reported: %v", m.Body)
		}
	}
	if !asked || len(s.rendered) != 0 || s.terminal.Body["rendered_map_index"] != nil {
		t.Fatalf("want the connection asked for and nothing reported: asked %v, rendered %v, terminal %v", asked, s.rendered, s.terminal.Body)
	}
}

// Issue 37, item 10: a variable set as AIRFLOW_VAR_<KEY> under a secret's
// name was logged in clear by a Go task (Python logs ***), and could reach
// XCom. Airflow masks a variable's value when its key is a secret's name,
// wherever it came from; other variables stay readable. Before the fix the
// log showed the value.
func TestSensitiveVariablesAreMaskedWhereverTheyGo(t *testing.T) {
	const envSecret, dbSecret, region = "env-var-s3cr3t-value", "db-var-t0ken-value", "eu-central-1"
	env := map[string]string{"AIRFLOW_VAR_PAR_SECRET": envSecret, "AIRFLOW_VAR_PAR_REGION": region}
	b := New()
	b.Register("d", "t", func(ctx context.Context, c Client, log hclog.Logger, in struct {
		Note string `json:"note"`
	}) (map[string]string, error) {
		var got []string
		for _, key := range []string{"par_secret", "par_region", "api_token"} {
			v, err := c.GetVariable(ctx, key)
			if err != nil {
				return nil, err
			}
			log.Info("variable " + key + " is " + v)
			got = append(got, v)
		}
		if err := c.SetXCom(ctx, "vars", got); err != nil {
			return nil, err
		}
		return nil, errors.New("failed after reading " + strings.Join(got, ","))
	}, AllowConf("note"), WithMapIndexTemplate("{note}"))
	reply := func(m protocol.Message) (map[string]any, map[string]any) {
		if m.Type() == protocol.TypeGetVariable && m.Body["key"] == "api_token" {
			return map[string]any{"type": "VariableResult", "key": "api_token", "value": dbSecret}, nil
		}
		return nil, nil
	}
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	s := runFake(t, b, startupFrame(t, "d", "t", func(sd *protocol.StartupDetails) {
		sd.DagRun.Conf = map[string]any{"note": "copied " + envSecret}
	}), reply, serveConfig{lookupEnv: envOf(env), environ: environ})
	if s.terminal == nil {
		t.Fatalf("no terminal frame: %v", s.err)
	}
	var xcom string
	for _, m := range s.requests {
		if m.Type() == protocol.TypeSetXCom {
			xcom = fmt.Sprint(m.Body["value"])
		}
	}
	logs := fmt.Sprint(s.logs)
	if !strings.Contains(logs, "variable par_region is "+region) || !strings.Contains(xcom, region) {
		t.Fatalf("the task did not run as the test needs (a variable without a secret's name stays readable): log %s, XCom %q", logs, xcom)
	}
	for where, text := range map[string]string{"the log": logs, "XCom": xcom, "the failure": fmt.Sprint(s.terminal.Body), "the rendered fields and map index": reported(t, s)} {
		for _, secret := range []string{envSecret, dbSecret} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows %q: %s", where, secret, text)
			}
		}
	}
}
