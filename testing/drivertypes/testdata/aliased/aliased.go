package aliased

import (
	"context"

	sb "github.com/airflow-sandbox/airflow-go-worker/sandbox"
	"github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"
)

func create(ctx context.Context, d driver.Driver) (sb.Info, error) {
	if _, err := sb.NewBackend(d).Create(ctx, sb.Spec{}); err != nil {
		return sb.Info{}, err
	}
	return sb.Info{}, sb.ErrGone
}
