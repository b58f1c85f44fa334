package s3

import (
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
	"github.com/airflow-sandbox/airflow-go-worker/storage"
)

func TestAWSFromConnection(t *testing.T) {
	const secret = "wJalrXUtnFEMI-very-secret"
	const token = "FwoGZXIvYXdzE-session-token"
	tests := []struct {
		name    string
		conn    connections.Connection
		want    AWSConfig
		wantErr []string // substrings the error must contain
	}{
		{
			name: "login and password with region and endpoint",
			conn: connections.Connection{ConnID: "aws_default", ConnType: "aws", Login: "AKIAEXAMPLE", Password: secret,
				Extra: `{"region_name": "eu-west-1", "endpoint_url": "http://127.0.0.1:7070", "aws_session_token": "` + token + `"}`},
			want: AWSConfig{AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: secret, SessionToken: token, Region: "eu-west-1", EndpointURL: "http://127.0.0.1:7070"},
		},
		{
			name: "keys in extra as Airflow accepts",
			conn: connections.Connection{ConnID: "c", ConnType: "aws",
				Extra: `{"aws_access_key_id": "AKIAEXTRA", "aws_secret_access_key": "` + secret + `"}`},
			want: AWSConfig{AccessKeyID: "AKIAEXTRA", SecretAccessKey: secret},
		},
		{
			name: "same keys in login and extra are fine",
			conn: connections.Connection{ConnID: "c", ConnType: "aws", Login: "AKIA1", Password: secret,
				Extra: `{"aws_access_key_id": "AKIA1", "aws_secret_access_key": "` + secret + `"}`},
			want: AWSConfig{AccessKeyID: "AKIA1", SecretAccessKey: secret},
		},
		{
			name: "no keys means default chain",
			conn: connections.Connection{ConnID: "c", ConnType: "aws", Extra: `{"region_name": "us-west-2"}`},
			want: AWSConfig{Region: "us-west-2"},
		},
		{
			name: "empty connection",
			conn: connections.Connection{ConnID: "c"},
			want: AWSConfig{},
		},
		{
			name: "service_config endpoint",
			conn: connections.Connection{ConnID: "c", ConnType: "aws", Extra: `{"service_config": {"s3": {"endpoint_url": "https://minio.local:9000"}}}`},
			want: AWSConfig{EndpointURL: "https://minio.local:9000"},
		},
		{
			name:    "login without password",
			conn:    connections.Connection{ConnID: "myaws", ConnType: "aws", Login: "AKIA"},
			wantErr: []string{`"myaws"`, "password", "empty"},
		},
		{
			name:    "password without login",
			conn:    connections.Connection{ConnID: "myaws", ConnType: "aws", Password: secret},
			wantErr: []string{`"myaws"`, "login", "empty"},
		},
		{
			name:    "extra key without extra secret",
			conn:    connections.Connection{ConnID: "myaws", ConnType: "aws", Extra: `{"aws_access_key_id": "AKIA"}`},
			wantErr: []string{`"myaws"`, "extra aws_secret_access_key"},
		},
		{
			name:    "extra secret without extra key",
			conn:    connections.Connection{ConnID: "myaws", ConnType: "aws", Extra: `{"aws_secret_access_key": "` + secret + `"}`},
			wantErr: []string{`"myaws"`, "extra aws_access_key_id"},
		},
		{
			name: "conflicting login and extra keys",
			conn: connections.Connection{ConnID: "myaws", ConnType: "aws", Login: "AKIA1", Password: secret,
				Extra: `{"aws_access_key_id": "AKIA2", "aws_secret_access_key": "other-secret"}`},
			wantErr: []string{`"myaws"`, "keep only one"},
		},
		{
			name:    "session token without keys",
			conn:    connections.Connection{ConnID: "myaws", ConnType: "aws", Extra: `{"aws_session_token": "` + token + `"}`},
			wantErr: []string{`"myaws"`, "aws_session_token"},
		},
		{
			name:    "region not a string",
			conn:    connections.Connection{ConnID: "myaws", ConnType: "aws", Extra: `{"region_name": 5}`},
			wantErr: []string{`"myaws"`, "region_name", "string"},
		},
		{
			name:    "endpoint not a URL",
			conn:    connections.Connection{ConnID: "myaws", ConnType: "aws", Extra: `{"endpoint_url": "localhost:9000"}`},
			wantErr: []string{`"myaws"`, "endpoint_url", "http(s)"},
		},
		{
			name:    "endpoint with credentials in it",
			conn:    connections.Connection{ConnID: "myaws", ConnType: "aws", Extra: `{"endpoint_url": "https://AKIA1:` + secret + `@minio.local:9000"}`},
			wantErr: []string{`"myaws"`, "endpoint_url", "https://minio.local:9000", "login/password"},
		},
		{
			name:    "unparseable endpoint with credentials in it",
			conn:    connections.Connection{ConnID: "myaws", ConnType: "aws", Extra: `{"endpoint_url": "AKIA1:` + secret + `@minio.local:9000"}`},
			wantErr: []string{`"myaws"`, "endpoint_url", "http(s)"},
		},
		{
			name:    "a failure after the session token was read",
			conn:    connections.Connection{ConnID: "myaws", ConnType: "aws", Login: "AKIA1", Password: secret, Extra: `{"aws_session_token": "` + token + `", "region_name": 5}`},
			wantErr: []string{`"myaws"`, "region_name"},
		},
		{
			name:    "extra not JSON",
			conn:    connections.Connection{ConnID: "myaws", ConnType: "aws", Extra: `region_name=eu`},
			wantErr: []string{`"myaws"`, "extra"},
		},
		{
			name:    "wrong connection type",
			conn:    connections.Connection{ConnID: "mymodal", ConnType: "modal", Login: "ak-1", Password: secret},
			wantErr: []string{`"mymodal"`, `"modal"`, "aws"},
		},
		{
			name:    "host is refused with a hint",
			conn:    connections.Connection{ConnID: "myaws", ConnType: "aws", Host: "minio:9000"},
			wantErr: []string{`"myaws"`, "endpoint_url"},
		},
		{
			name:    "assume role is refused, not ignored",
			conn:    connections.Connection{ConnID: "myaws", ConnType: "aws", Extra: `{"role_arn": "arn:aws:iam::1:role/x"}`},
			wantErr: []string{`"myaws"`, "role_arn", "not supported"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Through the registry, which checks the type first.
			var got AWSConfig
			c, err := storage.Default.FromConnection("s3", tt.conn)
			if err == nil {
				got = *c.(*AWSConfig)
			}
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("want error containing %q, got config %v", tt.wantErr, got)
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
				for _, s := range []string{secret, token, "other-secret"} {
					if strings.Contains(err.Error(), s) {
						t.Errorf("error leaks a secret: %q", err)
					}
				}
				if got != (AWSConfig{}) {
					t.Errorf("on error want zero config, got %v", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestAWSConfigStringHidesSecrets(t *testing.T) {
	c := AWSConfig{AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: "s3cr3t", SessionToken: "t0k3n", Region: "eu-west-1"}
	s := c.String()
	if strings.Contains(s, "s3cr3t") || strings.Contains(s, "t0k3n") {
		t.Fatalf("String leaks a secret: %s", s)
	}
	if !strings.Contains(s, "AKIAEXAMPLE") || !strings.Contains(s, "eu-west-1") {
		t.Fatalf("String lost useful fields: %s", s)
	}
}
