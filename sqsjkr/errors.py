"""The error tree of sqsjkr.

Every error an operator may see derives from SqsjkrError and says what to fix.
"""

from __future__ import annotations


class SqsjkrError(Exception):
    """Base of all sqsjkr errors."""


class ConfigError(SqsjkrError):
    """The config file or a command-line option is invalid; the message names the field."""


class InvalidJobError(SqsjkrError):
    """A queue message is not a valid job; the message names the field and the reason."""


class DurationError(ValueError):
    """A duration is not an int number of seconds nor Go duration syntax."""


class AwsUnavailableError(SqsjkrError):
    """A transient AWS failure (throttling, 5xx, endpoint unreachable): back off and retry."""


class ResourceMissingError(SqsjkrError):
    """A queue or table named in the config does not exist."""
