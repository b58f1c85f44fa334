package protocol

// ReturnValueKey is the XCom key a task's result is pushed under (an
// XComRef with an empty key reads it).
const ReturnValueKey = "return_value"

// SourcesField is the rendered field that says where each input's value
// came from ("dag_run.conf[\"timeout\"]", "bundle defaults", an XCom, an
// asset event), so a value a run's conf set stands out in the UI.
const SourcesField = "_sources"
