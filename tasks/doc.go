// Package tasks is the task catalogue: provision, run, export, collect,
// destroy, convert and sweep. Each task is a plain Go function over narrow
// interfaces (Airflow, Storage) and the portable sandbox API, so it can be
// registered with the bundle runtime from Go code or from a YAML bundle
// config, and tested without Airflow.
//
// Dependencies point one way: tasks imports sandbox, sandbox/registry,
// storage and connections, never a backend package nor the bundle runtime.
// Backends are the ones the bundle's main package links (each registers
// itself with sandbox/registry); Deps.Backends replaces them in tests. The
// Airflow interface is satisfied structurally by bundles.Client.
package tasks
