"""The faces' door to the crontab converter: `sqsjkr crontab2tf` checks its options, converts a
crontab and renders the terraform jobs variable through this module, not sqsjkr.crontab itself.
"""

from __future__ import annotations

from sqsjkr.crontab.convert import convert_file as convert_file
from sqsjkr.crontab.convert import options_problem as options_problem
from sqsjkr.crontab.convert import rendered as rendered
from sqsjkr.crontab.eventbridge import DST_CHOICES as DST_CHOICES
from sqsjkr.crontab.eventbridge import ENGINES as ENGINES
from sqsjkr.crontab.eventbridge import MAX_KEY_LENGTH as MAX_KEY_LENGTH
from sqsjkr.crontab.eventbridge import MAX_MODULE_KEY_LENGTH as MAX_MODULE_KEY_LENGTH
from sqsjkr.crontab.eventbridge import ConvertOptions as ConvertOptions
from sqsjkr.crontab.eventbridge import DstChoice as DstChoice
from sqsjkr.crontab.eventbridge import Engine as Engine
from sqsjkr.crontab.parse import CrontabProblems as CrontabProblems
