// Package tasks is the task catalogue: provision, run, export, collect,
// destroy, convert and sweep. Each task is a plain Go function over narrow
// interfaces (Airflow, Storage, DriverOpener), so it can be registered with the
// bundle runtime from Go code or from a YAML bundle config, and tested without
// Airflow.
//
// Dependencies point one way: tasks imports sandbox, the drivers, storage and
// connections, never the bundle runtime. Its Airflow interface is satisfied
// structurally by bundles.Client.
package tasks
