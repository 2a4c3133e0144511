"""AWS failures as the faces report them: one line, whatever botocore, urllib3 or the endpoint said.

An endpoint may answer anything (a proxy's HTML page, a broken emulator): none of it may reach the operator as a traceback.
"""

from __future__ import annotations

import sys

from sqsjkr.errors import SqsjkrError
from sqsjkr.observability.logs import escape, shorten_command

#: The longest account of a failure a command prints; an endpoint's answer may be a whole page.
MAX_FAILURE_TEXT = 300


def aws_failure(exc: BaseException) -> str | None:
    """The one-line account of a failed AWS call; None for any other exception."""
    # Only a command that made AWS calls can fail with botocore's errors: the others need not
    # import botocore to rule them out.
    if "botocore" not in sys.modules:
        return None
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.parsers import ResponseParserError
    from urllib3.exceptions import HTTPError

    from sqsjkr.backends.aws import describe

    if not isinstance(exc, (BotoCoreError, ClientError, ResponseParserError, HTTPError)):
        return None
    return shorten_command(escape(describe(exc)), MAX_FAILURE_TEXT)


def failure_text(exc: Exception) -> str:
    """Why a read or an action failed, for a page or a command's one line: an AWS failure or
    one of sqsjkr's own errors; any other exception is raised again."""
    if isinstance(exc, SqsjkrError):
        return str(exc)
    message = aws_failure(exc)
    if message is None:
        raise exc
    return message
