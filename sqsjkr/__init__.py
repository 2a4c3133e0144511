"""sqsjkr: the SQS Job Kicker.

Receives JSON jobs from an SQS queue and runs them as shell commands, with DynamoDB locks and dedupe.
"""

__version__ = "0.1.0"
