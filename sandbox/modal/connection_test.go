package modal

import (
	"strings"
	"testing"

	"github.com/airflow-sandbox/airflow-go-worker/connections"
)

func TestCredentialsFromConnection(t *testing.T) {
	cfg, err := CredentialsFromConnection(&connections.Connection{ConnID: "m", ConnType: "modal", Login: "ak-1", Password: "as-secret", Extra: `{"environment":"dev"}`})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TokenID != "ak-1" || cfg.TokenSecret != "as-secret" || cfg.Environment != "dev" || cfg.Source != "m" {
		t.Fatalf("got %+v", cfg)
	}
	if s := cfg.String(); strings.Contains(s, "as-secret") || !strings.Contains(s, "ak-1") {
		t.Fatalf("String() leaks or lacks id: %s", s)
	}
}

func TestCredentialsFromConnectionNeitherOrNil(t *testing.T) {
	for _, c := range []*connections.Connection{nil, {ConnID: DefaultConnID, ConnType: "modal"}} {
		cfg, err := CredentialsFromConnection(c)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.HasTokens() || cfg.TokenSecret != "" {
			t.Fatalf("want SDK default credentials, got %+v", cfg)
		}
	}
}

func TestCredentialsFromConnectionOneTokenIsAnError(t *testing.T) {
	for _, c := range []connections.Connection{
		{ConnID: "half", ConnType: "modal", Login: "ak-1"},
		{ConnID: "half", ConnType: "modal", Password: "as-topsecret"},
	} {
		_, err := CredentialsFromConnection(&c)
		if err == nil {
			t.Fatalf("%+v: want an error", c)
		}
		if !strings.Contains(err.Error(), `"half"`) || strings.Contains(err.Error(), "as-topsecret") {
			t.Fatalf("error must name the connection and hide the secret: %v", err)
		}
	}
}

func TestCredentialsFromConnectionBadInput(t *testing.T) {
	cases := []connections.Connection{
		{ConnID: "x", ConnType: "aws", Login: "a", Password: "b"},
		{ConnID: "x", ConnType: "modal", Extra: `{"environment": 3}`},
		{ConnID: "x", ConnType: "modal", Extra: `not json`},
	}
	for _, c := range cases {
		if _, err := CredentialsFromConnection(&c); err == nil || !strings.Contains(err.Error(), `"x"`) {
			t.Fatalf("%+v: want an error naming the connection, got %v", c, err)
		}
	}
}
