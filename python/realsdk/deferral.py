"""What Airflow does with a Go task's DeferTask, by Airflow's own code.

Reads a DeferTask body (JSON) on stdin and prints, as JSON on one line:
the body as the task SDK's DeferTask model validates it, the trigger
Airflow's triggerer would build from it (the standard provider's
DateTimeTrigger, its kwargs deserialized by airflow.sdk.serde), and the
next_kwargs a resume gets once that trigger fired (the trigger's event
merged in as models/trigger.py's handle_event_submit merges it).
Used by bundles' tests; no Airflow database is needed.
"""

import json
import sys


def main() -> None:
    from airflow.sdk.execution_time.comms import DeferTask
    from airflow.sdk.serde import deserialize, serialize

    body = json.load(sys.stdin)
    msg = DeferTask.model_validate(body)
    kwargs = deserialize(msg.trigger_kwargs)
    module, _, name = msg.classpath.rpartition(".")
    trigger_cls = getattr(__import__(module, fromlist=[name]), name)
    trigger = trigger_cls(**kwargs)
    classpath, again = trigger.serialize()
    # The trigger's event: DateTimeTrigger yields its moment.
    next_kwargs = deserialize(msg.next_kwargs or {})
    next_kwargs["event"] = trigger.moment
    print(
        json.dumps(
            {
                "classpath": classpath,
                "moment": trigger.moment.isoformat(),
                "end_from_trigger": kwargs["end_from_trigger"],
                "trigger_kwargs_roundtrip": serialize(again) == msg.trigger_kwargs,
                "trigger_timeout_seconds": msg.trigger_timeout.total_seconds() if msg.trigger_timeout else None,
                "next_method": msg.next_method,
                "resumed_next_kwargs": serialize(next_kwargs),
            }
        )
    )


if __name__ == "__main__":
    main()
