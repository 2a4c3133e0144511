"""Limits of the AWS services that the job contract and the config are checked against.

Kept here, below the backends, so that validating a value never needs to import a backend.
"""

#: SQS's longest visibility timeout: 12 hours.
MAX_VISIBILITY_SECONDS = 43200
