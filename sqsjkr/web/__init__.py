"""The web dashboard (`sqsjkr web`, `pip install 'sqsjkr[web]'`): the fleet's state read from its
table, queues and scheduler, shown as server-rendered pages, with guarded actions.

Only command.py imports without the web extra: the rest needs Flask.
"""
