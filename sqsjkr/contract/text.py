"""Text as sqsjkr shows it anywhere: a message's strings escaped to stay on one line, and commands cut.

Pure functions over strings, shared by the logs, the CLI and the dashboard; no AWS, no daemon.
"""

from __future__ import annotations

import re

from sqsjkr.errors import shorten

#: Longest command shown in a log line; the rest is cut and its length said. A message may
#: carry a command of 256 KiB, which would make one log line of that size.
MAX_LOGGED_COMMAND = 200

# C0 and C1 controls, DEL, and Unicode's line and paragraph separators: anything that could end a
# log line early or forge one (a newline in an event_id), or drive a terminal (ESC); and the
# bidirectional controls, which make "bidi-\u202egnp.exe" read as "bidi-exe.png".
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape(text: str) -> str:
    """text with every control character written as an escape, so a log line stays one line."""
    return _UNSAFE.sub(lambda m: _NAMED.get(m[0]) or f"\\x{ord(m[0]):02x}", text)


def shorten_command(command: str, limit: int = MAX_LOGGED_COMMAND) -> str:
    """A command as logs show it: at most limit characters, the cut said."""
    return shorten(command, limit)
