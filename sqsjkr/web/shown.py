"""How the dashboard shows what came from messages and commands: bodies masked (by the contract's
rule), identifiers visibly escaped, ANSI colour codes stripped from output; times and spans.
"""

from __future__ import annotations

import re
import time
from typing import Any

from markupsafe import Markup
from markupsafe import escape as escape_html

from sqsjkr.contract.masking import shown_body
from sqsjkr.contract.text import escape
from sqsjkr.fleet.wording import ended_how, format_duration, format_span, local_time

# CSI sequences (colours, cursor moves), OSC sequences (titles, hyperlinks), and other escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]")
# Control characters but newline and tab: what is left after the sequences are gone.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# What the `visible` filter escapes but newline and tab (which a page shows as a blank): C0 and
# C1 controls, DEL, line separators and the bidirectional controls.
_PAGE_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]"
)


def page_value(value: Any) -> Any:
    """Every value a template writes ({{ ... }}, the environment's finalize): text with its
    control characters and bidi overrides visibly escaped as the `visible` filter writes them,
    so that no field a message or an operator filled in (a reason, who triggered, a scheduler's
    error) can reorder or hide what a page shows. Markup (a macro's output, tojson) was built
    from values that passed here already."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return _PAGE_UNSAFE.sub(lambda m: escape(m[0]), value)
    return value


def plain_output(text: str) -> str:
    """Output as text for a page: ANSI colour codes and other control characters stripped (the
    template's autoescaping does the HTML)."""
    return _CONTROL.sub("", _ANSI.sub("", text.replace("\r\n", "\n")))


def message_text(body: str) -> str:
    """A message's body as a page shows it: JSON masked and indented (as `dlq show` prints it),
    any other body as its text; control characters and bidi overrides visibly escaped."""
    text = shown_body(body)
    return "\n".join(escape(line) for line in (body if text is None else text).split("\n"))


def ago(then: float | None, now: float | None = None) -> str:
    if then is None:
        return "never"
    return f"{format_span((now or time.time()) - then)} ago"


def form_value(value: Any) -> Markup:
    """A form field's value, HTML-escaped only: it goes back to the dashboard as it came (an
    event id with a bidi override must name that event), and no page shows a hidden field."""
    return escape_html("" if value is None else str(value))


FILTERS = {
    "moment": lambda t: "-" if t is None else local_time(t),
    "ago": ago,
    "span": format_span,
    "duration": format_duration,
    "ended_how": ended_how,
    "plain": plain_output,
    # What came from a message (an event id, a message id, a user): its control characters and
    # bidirectional overrides shown as escapes, as the CLI prints them.
    "visible": lambda text: "" if text is None else escape(str(text)),
    "form_value": form_value,
}
