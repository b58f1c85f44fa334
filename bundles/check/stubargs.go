package check

import (
	"fmt"
	"slices"
	"strings"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/internal/jinja"
)

// goInputs is the Go side of a task's inputs: each one's name and what it
// is bound to.
type goInputs struct {
	td    TaskDescription
	names map[string]string // folded name -> the Go input's name
}

// fold matches names as the runtime matches a stub argument to an input:
// ignoring case and underscores.
func fold(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }

func newGoInputs(td TaskDescription) goInputs {
	g := goInputs{td: td, names: map[string]string{}}
	for _, n := range td.Inputs {
		g.names[fold(n)] = n
	}
	for n := range td.Defaults {
		g.names[fold(n)] = n
	}
	for n := range td.XComInputs {
		g.names[fold(n)] = n
	}
	for n := range td.ParamInputs {
		g.names[fold(n)] = n
	}
	return g
}

// input is the Go input a stub parameter name binds to ("" when none).
func (g goInputs) input(param string) string { return g.names[fold(param)] }

// bindingOf says what input n reads other than its default ("": nothing).
func (g goInputs) bindingOf(n string) string {
	if _, ok := g.td.Expansions[n]; ok {
		return "a mapped instance's element"
	}
	if x, ok := g.td.XComInputs[n]; ok {
		return fmt.Sprintf("XCom %s of %s", x.Key, x.Task)
	}
	if p, ok := g.td.ParamInputs[n]; ok {
		return "Dag param " + p
	}
	return ""
}

// takesEffect says whether a stub argument's value reaches the Go task on
// Airflow 3.3 all the same: the Go side reads the same upstream XCom, or
// has the same literal as the default of an input nothing else binds.
func (g goInputs) takesEffect(n string, src argSource) bool {
	switch {
	case n == "" || src.Unsupported != "":
		return false
	case src.Template:
		// The Go side renders the same template, as Airflow would.
		tmpl, ok := src.Literal.(string)
		return ok && g.td.Templates[n] == tmpl
	case src.XCom != "":
		x, ok := g.td.XComInputs[n]
		_, mapped := g.td.Expansions[n]
		return ok && !mapped && x.Task == src.XCom && x.Key == keyOf(src)
	}
	def, ok := g.td.Defaults[n]
	return ok && g.bindingOf(n) == "" && jsonEqual(def, src.Literal)
}

func keyOf(src argSource) string {
	if src.Key == "" {
		return "return_value"
	}
	return src.Key
}

// compareArguments: Airflow 3.3 hands a Go task none of the stub call's
// arguments (no arg_bindings before supervisor schema 2026-10-30), so each
// must reach it through the Go side's own bindings or defaults.
func (s *stubTask) compareArguments(td TaskDescription, version, bundle string) {
	g := newGoInputs(td)
	bound := argBindings(version)
	for _, name := range s.a.Positional {
		s.positionalArgument(name, s.a.Args[name], g, bound)
	}
	if bound {
		s.noteTemplates(bundle)
		return
	}
	for _, name := range sortedKeys(s.a.Args) {
		if !slices.Contains(s.a.Positional, name) && !g.takesEffect(g.input(name), s.a.Args[name]) {
			s.dropped(name, s.a.Args[name], g, fmt.Sprintf("the stub call passes %s=%s", name, show(s.a.Args[name])), version)
		}
	}
	for _, name := range sortedKeys(s.a.FunctionDefaults) {
		src := argSource{Literal: s.a.FunctionDefaults[name]}
		if !g.takesEffect(g.input(name), src) {
			s.dropped(name, src, g, fmt.Sprintf("the stub function's default %s=%s (no argument passed)", name, show(src)), version)
		}
	}
}

// show writes an argument as the Dag author wrote it, near enough.
func show(src argSource) string {
	switch {
	case src.Unsupported != "":
		return "<" + src.Unsupported + ">"
	case src.XCom != "" && keyOf(src) != "return_value":
		return fmt.Sprintf("%s()[%q]", src.XCom, src.Key)
	case src.XCom != "":
		return src.XCom + "()"
	}
	return jsonValue(src.Literal)
}

// dropped reports a value the Go task would not see, and how to give it.
func (s *stubTask) dropped(name string, src argSource, g goInputs, what, version string) {
	n := g.input(name)
	problem := fmt.Sprintf("%s, which Airflow 3.3 does not hand a Go task (the bundle declares supervisor schema %s: no arg_bindings)", what, version)
	fix := s.bindingFix(name, src)
	switch {
	case src.Template:
		problem += "; Airflow renders a template only in its Python task runner, so no Go task ever sees it rendered"
	case src.Unsupported != "":
		problem += fmt.Sprintf("; and it is a %s, which no Go-side binding can give", src.Unsupported)
	case n == "":
		problem += fmt.Sprintf("; the Go task has no input %s at all", name)
		fix = fmt.Sprintf("add an input %s to the Go task (a field of its input struct), then %s", name, fix)
	case g.bindingOf(n) != "":
		problem += fmt.Sprintf("; the Go task reads input %s from %s instead", n, g.bindingOf(n))
	case hasKey(g.td.Defaults, n):
		problem += fmt.Sprintf("; the Go task runs with its own default %s=%s instead", n, jsonValue(g.td.Defaults[n]))
	default:
		problem += fmt.Sprintf("; the Go task runs without it (input %s has no default)", n)
	}
	s.add(StubArgumentDropped, problem, fix)
}

// bindingFix is what makes a stub argument's value reach the Go task.
func (s *stubTask) bindingFix(name string, src argSource) string {
	switch {
	case src.Template:
		tmpl, _ := src.Literal.(string)
		if err := jinja.Check(tmpl); err == nil {
			return fmt.Sprintf("have the Go task render the same template: inputs: {%s: {template: %q}} under %s in the bundle config (Go: bundles.WithTemplate(%q, %q)), which renders it as Airflow does, and pack it again", name, tmpl, s.where, name, tmpl)
		}
		return fmt.Sprintf("a Go task renders only {{ name }} substitutions of Airflow's template context, not this (filters, macros or statements): drop it from the stub and have the Go task work the value out from what it reads itself, its DagRun (LogicalDate, DataIntervalStart/End, RunID, Conf), its TaskInstance, or a Dag param (inputs: {%s: {param: <name>}} under %s, Go bundles.WithParam); docs/bundle-config.md shows how", name, s.where)
	case src.Unsupported != "":
		return fmt.Sprintf("pass a JSON value or an upstream task's result instead (%s=upstream()), bound on the Go side (inputs: {%s: {xcom: upstream}} under %s), or drop it", name, name, s.where)
	case src.XCom != "" && keyOf(src) != "return_value":
		return fmt.Sprintf("bind it on the Go side: inputs: {%s: {xcom: %s, key: %s}} under %s in the bundle config (Go: bundles.WithXComKey(%q, %q, %q)), and pack it again", name, src.XCom, src.Key, s.where, name, src.XCom, src.Key)
	case src.XCom != "":
		return fmt.Sprintf("bind it on the Go side: inputs: {%s: {xcom: %s}} under %s in the bundle config (Go: bundles.WithXCom(%q, %q)), and pack it again", name, src.XCom, s.where, name, src.XCom)
	}
	return fmt.Sprintf("set defaults: {%s: %s} under %s in the bundle config (Go: bundles.WithDefaults(map[string]any{%q: %s})), with no other binding for %s, and pack it again; or drop the value from the stub", name, jsonValue(src.Literal), s.where, name, goLiteral(src.Literal), name)
}

// positionalArgument: the Go side binds inputs by name, so every argument
// of a stub call must be passed by name.
func (s *stubTask) positionalArgument(name string, src argSource, g goInputs, bound bool) {
	problem := fmt.Sprintf("the stub call passes %s by position (for parameter %s): the Go task binds its inputs by name, and Airflow 3.3 hands it no argument at all", show(src), name)
	fix := fmt.Sprintf("pass it by name (%s=...) in the stub call", name)
	if bound {
		problem = fmt.Sprintf("the stub call passes %s by position (for parameter %s): the Go task binds its inputs by name, and whether Airflow 3.4's arg_bindings name an argument passed by position is untested", show(src), name)
	} else if !g.takesEffect(g.input(name), src) {
		fix += "; " + s.bindingFix(name, src)
	}
	s.add(StubArgumentDropped, problem, fix)
}

// noteTemplates: on Airflow 3.4 the arguments arrive, but whether Airflow
// renders a template in them first is untested.
func (s *stubTask) noteTemplates(bundle string) {
	for _, name := range sortedKeys(s.a.Args) {
		if s.a.Args[name].Template {
			s.c.note("%s: Dag %s, task %s: argument %s=%s is a Jinja template; whether Airflow 3.4 renders it before handing it to a Go task (%s) is untested", s.d.FileLoc, s.d.DagID, s.t.TaskID, name, show(s.a.Args[name]), bundle)
		}
	}
}

// compareParams: Airflow hands a Go task dag_run.conf but no params, so an
// input bound to a Dag param needs the param's default as its own, or a
// run whose conf lacks the key runs otherwise than a Python task would.
func (s *stubTask) compareParams(td TaskDescription) {
	for _, in := range sortedKeys(td.ParamInputs) {
		name := td.ParamInputs[in]
		p, ok := s.a.Params[name]
		if !ok || p.Required {
			continue
		}
		ours, has := td.Defaults[in]
		if p.Unsupported == "" && has && jsonEqual(ours, p.Default) {
			continue
		}
		theirs, fix := jsonValue(p.Default), fmt.Sprintf("set defaults: {%s: %s} under %s in the bundle config (Go: bundles.WithDefaults(map[string]any{%q: %s})) and pack it again", in, jsonValue(p.Default), s.where, in, goLiteral(p.Default))
		if p.Unsupported != "" {
			theirs, fix = "a "+p.Unsupported, fmt.Sprintf("give param %s a JSON default (a date as a string) and the same under defaults: for %s in %s", name, in, s.where)
		}
		goes := fmt.Sprintf("no value (input %s has no default)", in)
		if has {
			goes = "its default " + jsonValue(ours)
		}
		s.add(ParamDefaultMismatch, fmt.Sprintf("input %s is bound to Dag param %s, whose default is %s (the Dag's params merged with the task's, as Airflow merges them); Airflow hands a Go task dag_run.conf but no params, so a run whose conf lacks %s gives the Go task %s where a Python task sees %s", in, name, theirs, name, goes, theirs), fix)
	}
}

// paramsIgnoreConf: with [core] dag_run_conf_overrides_params off, a Python
// task's params keep the Dag's values whatever the run's conf says, while a
// Go input bound to a param reads the conf.
func (s *stubTask) paramsIgnoreConf(td TaskDescription) {
	for _, in := range sortedKeys(td.ParamInputs) {
		name := td.ParamInputs[in]
		s.add(ParamDefaultMismatch, fmt.Sprintf("input %s is bound to Dag param %s, which the Go task reads from the run's dag_run.conf; this Airflow has [core] dag_run_conf_overrides_params off, so a Python task's params ignore the conf and a run setting %s would change the Go task only", in, name, name),
			fmt.Sprintf("bind %s another way (its default alone: defaults: under %s, with no {param: %s}), or turn [core] dag_run_conf_overrides_params back on", in, s.where, name))
	}
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}
