package clean

import "github.com/airflow-sandbox/airflow-go-worker/sandbox/driver"

func gone() (driver.Info, error) { return driver.Info{}, driver.ErrGone }
