"""`sqsjkr dlq delete` and `dlq purge`: clearing the dead-letter queue (and its alarm) without the AWS
console, against the moto server.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from .conftest import Aws
from .test_dlq import JOB, conf, dead_letter, dlq_url, listed, site, sqsjkr

__all__ = ["conf", "site"]  # the fixtures, used by name


def in_dlq(site: Aws) -> int:
    """Messages in the dead-letter queue, visible or not."""
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = site.sqs.get_queue_attributes(QueueUrl=dlq_url(site), AttributeNames=names)
    return sum(int(attributes["Attributes"][name]) for name in names)


def test_delete_removes_the_named_messages_by_either_id(
    site: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second, kept = (dead_letter(site, JOB) for _ in range(3))
    [second_dlq_id] = [m["message_id"] for m in listed(capsys, conf) if m["original_id"] == second]
    code, out, err = sqsjkr(capsys, "dlq", "delete", "-c", str(conf), first, second_dlq_id)
    assert (code, err) == (0, "")
    assert sorted(line.split(" (original ")[1] for line in out.splitlines()) == sorted(
        [f"{first})", f"{second})"]
    )
    assert [m["original_id"] for m in listed(capsys, conf)] == [kept]


def test_delete_of_an_unknown_id_exits_1_and_deletes_the_others(
    site: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    known = dead_letter(site, JOB)
    code, out, err = sqsjkr(capsys, "dlq", "delete", "-c", str(conf), known, "nope")
    assert code == 1
    assert out.startswith("deleted ") and f"(original {known})" in out
    assert err == f'sqsjkr: error: no message "nope" in dead-letter queue {site.queue_name}-dlq\n'
    assert in_dlq(site) == 0


def test_purge_deletes_every_message_after_asking(
    site: Aws, conf: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(12):  # more than one receive's worth
        site.sqs.send_message(QueueUrl=dlq_url(site), MessageBody=JOB)
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    code, out, _ = sqsjkr(capsys, "dlq", "purge", "-c", str(conf))
    assert (code, out) == (1, "")
    assert in_dlq(site) == 12
    code, out, err = sqsjkr(capsys, "dlq", "purge", "-c", str(conf), "--yes")
    assert (code, err) == (0, "")
    assert out == f"deleted 12 message(s) from dead-letter queue {site.queue_name}-dlq\n"
    assert in_dlq(site) == 0
