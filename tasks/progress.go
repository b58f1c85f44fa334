package tasks

import "time"

// ProgressEvery is how often long transfers between storage and a sandbox
// log their progress (storage.Progress); package storage's own progress
// lines are off for them, since these name both ends.
var ProgressEvery = 5 * time.Second
