// Package tasks is the task catalogue: provision, run, export, collect,
// destroy, convert, list and sweep. Each task is a plain Go function over
// a narrow interface to Airflow, the portable sandbox API and a storage
// handle (storage.Handle, one per task instance), so it can be registered
// with the bundle runtime from Go code or from a YAML bundle config, and
// tested without Airflow.
//
// Dependencies point one way: tasks imports sandbox, sandbox/registry,
// storage and connections, never a backend package nor the bundle runtime.
// Backends are the ones the bundle's main package links (each registers
// itself with sandbox/registry), and so are stores (storage.Default);
// Deps.Backends and Deps.Stores replace them in tests. The
// Airflow interface is satisfied structurally by bundles.Client.
package tasks
