package connections

import (
	"strings"
	"testing"
)

func TestModalFromConnection(t *testing.T) {
	cfg, err := ModalFromConnection(&Connection{ConnID: "m", ConnType: "modal", Login: "ak-1", Password: "as-secret", Extra: `{"environment":"dev"}`})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TokenID != "ak-1" || cfg.TokenSecret != "as-secret" || cfg.Environment != "dev" || cfg.ConnID != "m" {
		t.Fatalf("got %+v", cfg)
	}
	if s := cfg.String(); strings.Contains(s, "as-secret") || !strings.Contains(s, "ak-1") {
		t.Fatalf("String() leaks or lacks id: %s", s)
	}
}

func TestModalFromConnectionNeitherOrNil(t *testing.T) {
	for _, c := range []*Connection{nil, {ConnID: DefaultModalConnID, ConnType: "modal"}} {
		cfg, err := ModalFromConnection(c)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.HasTokens() || cfg.TokenSecret != "" {
			t.Fatalf("want SDK default credentials, got %+v", cfg)
		}
	}
}

func TestModalFromConnectionOneTokenIsAnError(t *testing.T) {
	for _, c := range []Connection{
		{ConnID: "half", ConnType: "modal", Login: "ak-1"},
		{ConnID: "half", ConnType: "modal", Password: "as-topsecret"},
	} {
		_, err := ModalFromConnection(&c)
		if err == nil {
			t.Fatalf("%+v: want an error", c)
		}
		if !strings.Contains(err.Error(), `"half"`) || strings.Contains(err.Error(), "as-topsecret") {
			t.Fatalf("error must name the connection and hide the secret: %v", err)
		}
	}
}

func TestModalFromConnectionBadInput(t *testing.T) {
	cases := []Connection{
		{ConnID: "x", ConnType: "aws", Login: "a", Password: "b"},
		{ConnID: "x", ConnType: "modal", Extra: `{"environment": 3}`},
		{ConnID: "x", ConnType: "modal", Extra: `not json`},
	}
	for _, c := range cases {
		if _, err := ModalFromConnection(&c); err == nil || !strings.Contains(err.Error(), `"x"`) {
			t.Fatalf("%+v: want an error naming the connection, got %v", c, err)
		}
	}
}
