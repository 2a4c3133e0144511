"""The HTTP API under /api/v1: a third face beside the CLI and the dashboard, over the fleet layer,
served on `sqsjkr web`'s listener to holders of a token (`--api-tokens`).
"""
