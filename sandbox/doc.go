// Package sandbox is the portable sandbox API that tasks and Go users
// program against, modelled on gocloud.dev/blob: a Backend (one open
// connection to a sandbox backend) creates, opens, attaches to and lists
// Sandboxes; both are small concrete types over the driver.Driver interface
// (package sandbox/driver) that each backend implements in its own package
// (sandbox/local, sandbox/modal, sandbox/opensandbox). Drivers never import
// each other, register themselves with sandbox/registry, and all pass the
// same conformance suite (testing/conformance).
//
// This layer validates specs, refuses what a backend's Capabilities do not
// cover, stamps ownership tags and bounds what is read; features only some
// backends have are reached through the driver's optional interfaces, and
// Backend.As / Sandbox.As reach the backend's own client.
//
// The package knows nothing of Airflow. Ownership (owner, holder, expiry,
// network policy) is expressed as tags whose names and formats match what the
// Python provider reads (docs/handoff.md, "The ownership tags").
package sandbox
