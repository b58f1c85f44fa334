package redact

import (
	"strings"
	"testing"
)

// Airflow's rule (task SDK 1.3.2): a name is a secret's when, lower-cased
// and with each run of other characters than letters, digits and "_" made
// one "_", it contains a sensitive fragment.
func TestNamesAreSensitiveAsAirflowSays(t *testing.T) {
	var n Names
	for name, want := range map[string]bool{
		"par_secret": true, "PAR_SECRET": true, "my.api-key": true, " Webhook URL ": true, "db_dsn": true,
		"http_proxy": true, "aws_access_key_id": true, "bearer": true, "private key": true,
		"region": false, "bucket_name": false, "par_region": false, "tok": false, "": false,
	} {
		if got := n.Sensitive(name); got != want {
			t.Errorf("Sensitive(%q) = %v, want %v", name, got, want)
		}
	}
	more := NamesFromEnv(func(k string) (string, bool) {
		return map[string]string{SensitiveNamesEnv: " Region , pin"}[k], k == SensitiveNamesEnv
	})
	if !more.Sensitive("par_region") || !more.Sensitive("PIN_CODE") || more.Sensitive("bucket") {
		t.Error("[core] sensitive_var_conn_names adds fragments")
	}
	off := NamesFromEnv(func(k string) (string, bool) { return "False", k == HideSensitiveEnv })
	if off.Sensitive("password") {
		t.Error("hide_sensitive_var_conn_fields = False turns name-based masking off")
	}
}

// A connection's extra is masked whole, and the values under secrets'
// names inside it; its other values stay readable.
func TestAddExtraMasksTheWholeAndItsSecrets(t *testing.T) {
	const extra = `{"region_name": "us-east-1", "aws_session_token": "SESSION-T0KEN-1", "auth": {"client_secret": "NESTED-SECRET-2", "scopes": ["read-scope"]}, "api_key": 987654}`
	s := New()
	s.AddExtra(extra, Names{})
	got := s.String("extra " + extra + " region us-east-1 scope read-scope token SESSION-T0KEN-1 nested NESTED-SECRET-2 key 987654")
	want := "extra *** region us-east-1 scope read-scope token *** nested *** key ***"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	s = New()
	s.AddExtra("not json but a long extra", Names{})
	if got := s.String("x not json but a long extra"); !strings.HasSuffix(got, "***") {
		t.Fatalf("an extra that is not JSON is masked whole: %s", got)
	}
}
