package bundles

import (
	"context"
	"fmt"
	"sync"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// What one running task instance accumulates for its outcome: its outlets'
// events and its rendered map index, which the client sets while it runs and
// the terminal frame carries.

// runState is what a running task may change about how it ends: its outlet
// events and its rendered map index.
type runState struct {
	outlets *Outlets
	rpc     *rpc

	mu       sync.Mutex
	mapIndex *string
	// report is what reportInputs sent (rendered.go).
	report *renderedReport
}

// maxMapIndexName is the length of Airflow's rendered_map_index column.
const maxMapIndexName = 250

func (st *runState) setMapIndex(ctx context.Context, name string) error {
	if r := []rune(name); len(r) > maxMapIndexName {
		name = string(r[:maxMapIndexName-1]) + "…"
	}
	st.mu.Lock()
	st.mapIndex = &name
	st.mu.Unlock()
	if _, err := st.rpc.call(ctx, &protocol.SetRenderedMapIndex{RenderedMapIndex: name}); err != nil {
		return fmt.Errorf("setting the rendered map index: %w", err)
	}
	return nil
}

func (st *runState) renderedMapIndex() *string {
	if st == nil {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.mapIndex
}
