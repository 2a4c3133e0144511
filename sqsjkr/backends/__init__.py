"""The stores and the queue behind small Protocols: SQS, locks, dedupe claims, leases and AWS clients.

DynamoDB and SQS are one implementation of each; in-memory and no-op ones sit beside them.
"""
