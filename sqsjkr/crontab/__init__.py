"""The crontab migration tool (`sqsjkr crontab2tf`): reading crontabs, converting their schedules,
writing the terraform module's jobs variable."""
