"""Imported by the fork server of tests/forked.py after sqsjkr: reads botocore's data files once,
so that each forked daemon, local mode or web server finds its clients' models already parsed.

A forked process that makes its clients itself parses the service models, their endpoint rules
and endpoints.json again: about 0.1 s of CPU each, for some 230 processes a run.
"""

from __future__ import annotations

from sqsjkr.backends.aws import SERVICES, make_client, make_session

_session = make_session(region="us-east-1")
# Explicit keys: the search of the credential chain could otherwise ask the instance metadata
# service, which is no part of reading the models.
_session.set_credentials("preload", "preload")
for _service in sorted(SERVICES):
    make_client(_session, _service)
del _session, _service
