package connections

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// secret is planted in bad inputs; no error may ever contain it (or a
// piece of it that a misparse could expose).
const secret = "s3cr3t"

func assertNoSecret(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, piece := range []string{secret, "s3cr", "cr3t"} {
		if strings.Contains(err.Error(), piece) {
			t.Errorf("error leaks the password: %v", err)
		}
	}
}

func TestParseURI(t *testing.T) {
	cases := []struct {
		name, uri string
		want      Connection
	}{
		{"aws with empty host and encoded secret", "aws://AKIAID:se%2Fcr%40et%3Ax@/?region_name=eu-west-1",
			Connection{ConnType: "aws", Login: "AKIAID", Password: "se/cr@et:x", Extra: `{"region_name":"eu-west-1"}`}},
		{"postgres", "postgres://user:p%40ss@db.example.com:5432/mydb",
			Connection{ConnType: "postgres", Login: "user", Password: "p@ss", Host: "db.example.com", Port: 5432, Schema: "mydb"}},
		{"postgresql renamed", "postgresql://h/db", Connection{ConnType: "postgres", Host: "h", Schema: "db"}},
		{"dashes become underscores and __extra__ is kept", "google-cloud-platform://?__extra__=%7B%22project%22%3A+%22p%22%7D&ignored=1",
			Connection{ConnType: "google_cloud_platform", Extra: `{"project": "p"}`}},
		{"host with protocol", "my-conn://https://Example.com:8080/path",
			Connection{ConnType: "my_conn", Host: "https://example.com", Port: 8080, Schema: "path"}},
		{"protocol without a host is dropped, as in Airflow", "x://https:///db", Connection{ConnType: "x", Schema: "db"}},
		{"IPv6 host", "ssh://u:p@[::1]:2222/", Connection{ConnType: "ssh", Login: "u", Password: "p", Host: "::1", Port: 2222}},
		{"IPv6 host without port", "ssh://[fe80::1]", Connection{ConnType: "ssh", Host: "fe80::1"}},
		{"repeated key keeps the last value, blank values kept", "x://h/?a=1&b=&a=2&c&&d=%26",
			Connection{ConnType: "x", Host: "h", Extra: `{"a":"2","b":"","c":"","d":"&"}`}},
		{"last __extra__ wins", "x://h/?__extra__=%7B%22a%22%3A1%7D&__extra__=%7B%22b%22%3A2%7D", Connection{ConnType: "x", Host: "h", Extra: `{"b":2}`}},
		{"host lower-cased, the rest kept", "X://User:Pw@MyHost.Example/Schema",
			Connection{ConnType: "x", Login: "User", Password: "Pw", Host: "myhost.example", Schema: "Schema"}},
		{"encoded path as host keeps case", "x://%2Ftmp%2FSock", Connection{ConnType: "x", Host: "/tmp/Sock"}},
		{"unencoded colon in password", "x://u:pa:ss@h", Connection{ConnType: "x", Login: "u", Password: "pa:ss", Host: "h"}},
		{"unencoded @ in password: the last @ ends it", "x://u:p@ss@h", Connection{ConnType: "x", Login: "u", Password: "p@ss", Host: "h"}},
		{"login only", "x://u@h", Connection{ConnType: "x", Login: "u", Host: "h"}},
		{"empty password", "x://u:@h", Connection{ConnType: "x", Login: "u", Host: "h"}},
		{"malformed escape kept", "x://u:100%25%@h", Connection{ConnType: "x", Login: "u", Password: "100%%", Host: "h"}},
		{"UTF-8 escapes", "x://u:%C3%A9@h", Connection{ConnType: "x", Login: "u", Password: "é", Host: "h"}},
		{"plus is literal outside the query", "x://u:a+b@h?q=a+b%2Bc", Connection{ConnType: "x", Login: "u", Password: "a+b", Host: "h", Extra: `{"q":"a b+c"}`}},
		{"fragment dropped", "x://h/db#frag?x=1", Connection{ConnType: "x", Host: "h", Schema: "db"}},
		{"empty port", "x://h:/db", Connection{ConnType: "x", Host: "h", Schema: "db"}},
		{"schema with slash", "x://h/a%2Fb/c", Connection{ConnType: "x", Host: "h", Schema: "a/b/c"}},
		{"surrounding spaces", "  x://h  ", Connection{ConnType: "x", Host: "h"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseURI("my_conn", c.uri)
			if err != nil {
				t.Fatal(err)
			}
			c.want.ConnID = "my_conn"
			if got != c.want {
				t.Errorf("got  %#v\nwant %#v", got, c.want)
			}
			if _, err := got.ExtraMap(); err != nil {
				t.Errorf("extra is not a JSON object: %v", err)
			}
		})
	}
}

func TestParseURIErrors(t *testing.T) {
	cases := []struct{ name, uri, want string }{
		{"port not a number", "x://u:" + secret + "@h:abc/db", "port that is not an integer"},
		{"port out of range", "x://u:" + secret + "@h:70000", "port 70000, outside 0-65535"},
		{"unencoded slash in password", "x://u:s3cr/3t@h", "port that is not an integer"},
		{"negative port", "x://h:-1", "port that is not an integer"},
		{"no scheme", "u:" + secret + "@h", `no "://"`},
		{"bad conn type", "1x://u:" + secret + "@h", "valid conn type"},
		{"bad __extra__", "x://u:" + secret + "@h/?__extra__=" + secret, "__extra__ is not a JSON object"},
		{"__extra__ a list", "x://h/?__extra__=%5B1%5D", "__extra__ is not a JSON object"},
		{"unclosed IPv6", "x://u:" + secret + "@[::1", "closing ']'"},
		{"junk after IPv6", "x://[::1]x", "not a :port"},
		{"too many ://", "a://b://c://d://", `"://" 4 times`},
		{"second :// after password", "x://u:s3://cr3t@h", `second "://"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseURI("c1", c.uri)
			if err == nil {
				t.Fatalf("no error; parsed %#v", got)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"c1"`) {
				t.Errorf("error %q should name the connection and say %q", err, c.want)
			}
			if got.Password != "" || got.Login != "" {
				t.Error("a failed parse returned credentials")
			}
			assertNoSecret(t, err)
		})
	}
}

func TestParseJSON(t *testing.T) {
	cases := []struct {
		name, js string
		want     Connection
	}{
		{"all fields, object extra keeps key order", `{"conn_type": "postgres", "host": "h", "login": "u", "password": "p", "schema": "db", "port": 5432, "extra": {"z": 1, "a": {"b": [true]}}}`,
			Connection{ConnType: "postgres", Host: "h", Login: "u", Password: "p", Schema: "db", Port: 5432, Extra: `{"z":1,"a":{"b":[true]}}`}},
		{"port as string, string extra", `{"conn_type": "x", "port": "8080", "extra": "{\"k\": \"v\"}"}`, Connection{ConnType: "x", Port: 8080, Extra: `{"k": "v"}`}},
		{"conn type normalised, nulls ignored", `{"conn_type": "google-cloud-platform", "host": null, "port": null, "extra": null, "description": "d"}`, Connection{ConnType: "google_cloud_platform"}},
		{"extra_dejson", `{"conn_type": "x", "extra_dejson": {"a": 1}}`, Connection{ConnType: "x", Extra: `{"a":1}`}},
		{"uri alone", `{"uri": "aws://k:s@/?region_name=r", "description": "d"}`, Connection{ConnType: "aws", Login: "k", Password: "s", Extra: `{"region_name":"r"}`}},
		{"matching conn_id", `{"conn_id": "c1", "conn_type": "x"}`, Connection{ConnType: "x"}},
		{"empty port and extra", `{"conn_type": "x", "port": "", "extra": ""}`, Connection{ConnType: "x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseJSON("c1", []byte(c.js))
			if err != nil {
				t.Fatal(err)
			}
			c.want.ConnID = "c1"
			if got != c.want {
				t.Errorf("got  %#v\nwant %#v", got, c.want)
			}
		})
	}
}

func TestParseJSONErrors(t *testing.T) {
	pw := `"password": "` + secret + `"`
	cases := []struct{ name, js, want string }{
		{"port word", `{"conn_type": "x", ` + pw + `, "port": "abc"}`, `port "abc" is not an integer`},
		{"port fraction", `{"conn_type": "x", ` + pw + `, "port": 1.5}`, "port 1.5 is not an integer"},
		{"port too big", `{"conn_type": "x", "port": 70000}`, "port 70000 is not an integer in 0-65535"},
		{"port a list", `{"conn_type": "x", "port": [1]}`, "port must be an integer"},
		{"unknown field", `{"conn_type": "x", "passwd": "` + secret + `", "hots": "h"}`, "unknown field(s) hots, passwd"},
		{"extra a number", `{"conn_type": "x", ` + pw + `, "extra": 3}`, "field extra must be a JSON object"},
		{"extra string not JSON", `{"conn_type": "x", "extra": "` + secret + `"}`, "field extra is a string that is not a JSON object"},
		{"extra and extra_dejson", `{"conn_type": "x", "extra": {}, "extra_dejson": {}}`, "both extra and extra_dejson"},
		{"uri mixed with fields", `{"uri": "x://h", "host": "h"}`, "both uri and host"},
		{"conn_id mismatch", `{"conn_id": "other", "conn_type": "x"}`, "does not match the conn_id"},
		{"password not a string", `{"conn_type": "x", "password": 12345}`, "field password must be a string"},
		{"not an object", `["x"]`, "not a JSON object"},
		{"null", `null`, "JSON is null"},
		{"broken JSON", `{"conn_type": "x", "password": "` + secret, "not a JSON object"},
		{"uri is bad", `{"uri": "x://u:` + secret + `@h:port"}`, "port that is not an integer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseJSON("c1", []byte(c.js))
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"c1"`) {
				t.Fatalf("error %v, want one naming the connection and saying %q", err, c.want)
			}
			assertNoSecret(t, err)
		})
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv("AIRFLOW_CONN_MY_AWS", "aws://k:s@/?region_name=r")
	t.Setenv("AIRFLOW_CONN_MY_JSON", "  \n{\"conn_type\": \"x\", \"host\": \"h\"}")
	t.Setenv("AIRFLOW_CONN_EMPTY", " ")
	t.Setenv("AIRFLOW_CONN_BAD", "x://u:"+secret+"@h:nope")

	c, ok, err := FromEnv("my_aws")
	if err != nil || !ok || c.ConnID != "my_aws" || c.ConnType != "aws" || c.Password != "s" {
		t.Errorf("URI form: %#v, %v, %v", c, ok, err)
	}
	c, ok, err = FromEnv("my_json")
	if err != nil || !ok || c.ConnType != "x" || c.Host != "h" {
		t.Errorf("JSON form: %#v, %v, %v", c, ok, err)
	}
	if _, ok, err := FromEnv("not_set_anywhere"); ok || err != nil {
		t.Errorf("unset variable: ok=%v err=%v", ok, err)
	}
	for id, want := range map[string]string{"empty": "AIRFLOW_CONN_EMPTY", "bad": "AIRFLOW_CONN_BAD"} {
		_, ok, err := FromEnv(id)
		if !ok || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: ok=%v err=%v, want an error naming %s", id, ok, err, want)
		}
		assertNoSecret(t, err)
	}
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFile(t *testing.T) {
	want := map[string]Connection{
		"aws_default": {ConnID: "aws_default", ConnType: "aws", Login: "k", Password: "s/x", Extra: `{"region_name":"eu-west-1"}`},
		"pg":          {ConnID: "pg", ConnType: "postgres", Host: "db", Port: 5432, Login: "u", Password: "p", Extra: `{"sslmode":"require"}`},
		"listed":      {ConnID: "listed", ConnType: "x", Host: "h"},
	}
	files := map[string]string{
		"conns.json": `{
  "aws_default": "aws://k:s%2Fx@/?region_name=eu-west-1",
  "pg": {"conn_type": "postgres", "host": "db", "port": "5432", "login": "u", "password": "p", "extra": {"sslmode": "require"}},
  "listed": ["x://h"]
}`,
		"conns.yaml": `
aws_default: aws://k:s%2Fx@/?region_name=eu-west-1
pg:
  conn_type: postgres
  host: db
  port: 5432
  login: u
  password: p
  extra_dejson:
    sslmode: require
listed:
  - conn_type: x
    host: h
`,
		"conns.env": "# comment\n\naws_default=aws://k:s%2Fx@/?region_name=eu-west-1\r\npg = {\"conn_type\": \"postgres\", \"host\": \"db\", \"port\": 5432, \"login\": \"u\", \"password\": \"p\", \"extra\": {\"sslmode\": \"require\"}}\nlisted=x://h\n",
	}
	files["conns.yml"] = files["conns.yaml"]
	for name, body := range files {
		t.Run(name, func(t *testing.T) {
			got, err := LoadFile(writeFile(t, name, body))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Errorf("got %d connections, want %d: %v", len(got), len(want), got)
			}
			for id, w := range want {
				if got[id] != w {
					t.Errorf("%s:\n got  %#v\n want %#v", id, got[id], w)
				}
			}
		})
	}
	for _, name := range []string{"empty.json", "empty.yaml", "empty.env"} {
		if got, err := LoadFile(writeFile(t, name, "\n")); err != nil || len(got) != 0 {
			t.Errorf("%s: %v, %v; want no connections and no error", name, got, err)
		}
	}
}

func TestLoadFileErrors(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"c.json", `{"good": "x://h", "bad": "x://u:` + secret + `@h:port"}`, `"bad": URI has a port that is not an integer`},
		{"c.json", `{"twice": ["x://a", "x://b"]}`, `"twice" has 2 values`},
		{"c.json", `{"num": 3}`, `"num" must be a URI string or a connection object`},
		{"c.json", `["x://h"]`, "not a JSON object mapping conn_id"},
		{"c.json", `{"": "x://h"}`, "empty conn_id"},
		{"c.yaml", "a: x://h\na: y://h\n", `"a" is defined twice (lines 1 and 2)`},
		{"c.yaml", "- x://h\n", "top level must be a mapping"},
		{"c.yaml", "n: 42\n", `"n" must be a URI string`},
		{"c.yaml", "k: {conn_type: x, password: " + secret + ", port: many}\n", `"k": port "many" is not an integer`},
		{"c.yaml", "a: [x\n", "not valid YAML"},
		{"c.env", "just words\n", "line 1 has no '='"},
		{"c.env", "=x://h\n", "line 1 has an empty conn_id"},
		{"c.env", "a=x://h\na=x://h\n", `"a" is defined twice (lines 1 and 2)`},
		{"c.env", "a=x://u:" + secret + "@h:p\n", `line 1: connection "a"`},
		{"c.env", "a=\n", `connection "a": the value is empty`},
		{"c.toml", "", `unsupported extension ".toml"`},
	}
	for _, c := range cases {
		t.Run(c.name+" "+c.want, func(t *testing.T) {
			p := writeFile(t, c.name, c.body)
			_, err := LoadFile(p)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("error %v, want one naming %s and saying %q", err, p, c.want)
			}
			assertNoSecret(t, err)
		})
	}
	if _, err := LoadFile(filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: %v", err)
	}
}

func TestEnvName(t *testing.T) {
	if got := EnvName("my-conn.id"); got != "AIRFLOW_CONN_MY-CONN.ID" {
		t.Errorf("EnvName = %q (Airflow only upper-cases the id)", got)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"aws://k:s@/?region_name=r", "x://[::1]:80/a?b=c&b=d", `{"conn_type":"x","port":"1"}`, "x://%zz@h", "a://b://c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse("id", s)
		if err != nil {
			if c.Password != "" {
				t.Fatal("credentials returned with an error")
			}
			return
		}
		if c.Port < 0 || c.Port > 65535 {
			t.Fatalf("port %d out of range", c.Port)
		}
		if _, err := c.ExtraMap(); err != nil {
			t.Fatalf("accepted an extra that is not a JSON object: %v", err)
		}
	})
}
