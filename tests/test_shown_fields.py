"""What a message or an operator wrote, as pages and /metrics show it (issue 30, item 18): raw
bidi and ESC characters in who triggered, a reason, the scheduler's error, sqsjkr_error and
sqsjkr_message_id reach no page and no label value; they are escaped as the CLI writes them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import requests

from sqsjkr.backends.history import run_type
from sqsjkr.contract.firing import Firing
from sqsjkr.contract.run import RunOutcome
from sqsjkr.observability.health import Health
from sqsjkr.observability.metrics import Metrics
from sqsjkr.observability.stats import Stats
from tests.conftest import wait_until
from tests.web_fleet import make_fleet, record
from tests.web_fleet import now as clock

#: Right-to-left override, ESC starting a colour, and a first strong isolate.
HOSTILE = "evil\u202egnp.exe\x1b[31mred\u2068"
RAW = ("\u202e", "\x1b", "\u2068")
ESCAPED = "evil\\x202egnp.exe\\x1b[31mred\\x2068"


def test_pages_escape_what_messages_and_operators_wrote(
    aws_env: dict[str, str], tmp_path: Path
) -> None:
    fleet = make_fleet(tmp_path)
    run = record(
        "shown",
        clock() - 60,
        RunOutcome.ERRORED,
        triggered_by=HOSTILE,
        trigger_reason=HOSTILE,
        error=HOSTILE,
    )
    fleet.history().finished(run)
    fleet.history().finished(record(HOSTILE, clock() - 60, RunOutcome.SUCCEEDED))
    firing = Firing(time.time() - 3600, f"arn:aws:scheduler:us-east-1:1:schedule/g/{HOSTILE}")
    body = {"event_id": "shown", "command": "true", "firing": firing.as_fields()}
    attributes = {
        "ERROR_CODE": HOSTILE,
        "ERROR_MESSAGE": HOSTILE,
        "SCHEDULE_ARN": HOSTILE,
    }
    fleet.sqs.send_message(
        QueueUrl=fleet.dlq_url,
        MessageBody=json.dumps(body),
        MessageAttributes={
            k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()
        },
    )
    ours = {"sqsjkr_error": HOSTILE, "sqsjkr_message_id": HOSTILE}
    fleet.sqs.send_message(
        QueueUrl=fleet.dlq_url,
        MessageBody='{"event_id": "x"}',
        MessageAttributes={k: {"DataType": "String", "StringValue": v} for k, v in ours.items()},
    )
    served = fleet.serve(enable_actions=True)
    try:
        run_page = _page(served.url + "run", event="shown", key=run_type(run))
        letters = wait_until(lambda: _letters_page(served.url), what="both letters on the page")
        event_page = _page(served.url + "event", id=HOSTILE)
    finally:
        served.close()
    # A form's field goes back as it came, so that an action names that very event; every
    # text a page shows is escaped.
    field = f'name="event_id" value="{HOSTILE}"'
    assert field in event_page
    for page in (run_page, letters, event_page.replace(field, "")):
        for raw in RAW:
            assert raw not in page
    assert ESCAPED in event_page
    assert run_page.count(ESCAPED) >= 3  # triggered by, its reason, the error
    assert letters.count(ESCAPED) >= 4  # error code, message, sqsjkr_error, sqsjkr_message_id


def _page(url: str, **query: str) -> str:
    response = requests.get(url, params=query, timeout=30)
    assert response.status_code == 200, response.text[:300]
    return response.text


def _letters_page(base: str) -> str | None:
    page = _page(base + "dead-letters")
    return page if page.count("evil") >= 6 else None


def test_metrics_label_values_are_escaped() -> None:
    metrics = Metrics(Stats(1), Health())
    metrics.report(record(HOSTILE, time.time(), RunOutcome.SUCCEEDED))
    metrics.fired(HOSTILE, Firing(time.time(), "arn:s", "rate(1 hour)"))
    text = metrics.exposition().decode()
    for raw in RAW:
        assert raw not in text
    assert f'event_id="{ESCAPED.replace(chr(92), chr(92) * 2)}"' in text
