"""An airflow Dag file that does not parse: check reports it."""

from airflow.sdk import dag

raise RuntimeError("this dag file is broken on purpose")
