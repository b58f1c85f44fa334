package onep

import "testing"

func TestWanted(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	pinned := func(k string) (string, bool) { return "4", k == "GOMAXPROCS" }
	for _, c := range []struct {
		args  []string
		env   func(string) (string, bool)
		procs int
		want  bool
	}{
		{[]string{"--comm=127.0.0.1:1", "--logs=127.0.0.1:2"}, none, 2, true},
		{[]string{"--logs", "127.0.0.1:2", "--comm", "127.0.0.1:1"}, none, 8, true},
		{[]string{"--comm=127.0.0.1:1", "--logs=127.0.0.1:2"}, pinned, 2, false}, // the operator's GOMAXPROCS
		{[]string{"--comm=127.0.0.1:1", "--logs=127.0.0.1:2"}, none, 1, false},   // one CPU already
		{[]string{"--comm=127.0.0.1:1"}, none, 2, false},                         // not a task start
		{[]string{"--airflow-metadata"}, none, 2, false},
		{[]string{"run", "--comm=x", "--logs=y"}, none, 2, false},
		{[]string{"--comm=x", "--logs=y", "--comm=z"}, none, 2, false},
		{[]string{"-test.run=X"}, none, 2, false},
		{nil, none, 2, false},
	} {
		if got := Wanted(c.args, c.env, c.procs); got != c.want {
			t.Errorf("Wanted(%q, procs %d) = %v, want %v", c.args, c.procs, got, c.want)
		}
	}
}
