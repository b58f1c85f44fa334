// Package taskinfo holds the types Bundle's introspection methods return to
// the bundle's own tools (check, describe): what a task's registration says
// about its wiring, which task authors never build.
package taskinfo

// Expansion is how a mapped task's input takes its element: of the list
// upstream task XComTask returned, or of Items.
type Expansion struct {
	XComTask string `json:"xcom,omitempty"`
	Items    []any  `json:"items,omitempty"`
	// Literal says Items is the list (possibly empty).
	Literal bool `json:"literal,omitempty"`
}
