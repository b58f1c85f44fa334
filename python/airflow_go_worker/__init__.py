"""Python helpers for airflow-go-worker bundles (see check)."""
