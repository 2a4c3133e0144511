# What puts each job's message on the queue: an EventBridge Scheduler schedule (scheduler.tf), or
# with schedule_engine = "rules", an EventBridge rule and its target (here).

locals {
  # Only the jobs with a schedule_expression: a pipeline's other steps are sent by the daemons,
  # each when the steps it runs after have succeeded for the firing (pipelines.tf).
  rule_jobs      = { for key, job in var.jobs : key => job if job.schedule_expression != null && var.schedule_engine == "rules" }
  scheduler_jobs = { for key, job in var.jobs : key => job if job.schedule_expression != null && var.schedule_engine == "scheduler" }

  # The message body of each job, in the daemon's format. Unset fields are left out rather than
  # sent as null or false: the daemon reads an absent field as its default, and a short body is
  # easier to read in the console. jsonencode sorts the keys, so plans show no spurious diffs.
  job_messages = {
    for key, job in var.jobs : key => {
      for field, value in {
        command                   = job.command
        envs                      = length(job.envs) > 0 ? job.envs : null
        event_id                  = coalesce(job.event_id, key)
        lock_id                   = job.lock_id
        life_time                 = job.life_time
        timeout                   = job.timeout
        abort_if_locked           = job.abort_if_locked ? true : null
        disable_life_time_trigger = job.disable_life_time_trigger ? true : null
        concurrency_key           = job.concurrency_key
        concurrency_limit         = job.concurrency_limit
        retries                   = job.retries
        retry_delay               = job.retry_delay
        # Read from the schedule by the daemon's catch-up (docs/schedules.md), not when it runs.
        catch_up = job.catch_up
        # The call's unset parts are left out too: the daemon reads them as their defaults.
        http = job.http == null ? null : { for part, value in job.http : part => value if value != null }
      } : field => value if value != null
    }
  }
}

locals {
  # Where each engine writes a firing's time and its schedule into the message: the Scheduler
  # substitutes its context attributes in a target's input; a rule's input transformer fills in
  # the event's time and its rule (input_paths below). A daemon reads them as the message's firing.
  firing_placeholders = var.schedule_engine == "rules" ? {
    time     = "<time>"
    schedule = "<rule>"
    } : {
    time     = "<aws.scheduler.scheduled-time>"
    schedule = "<aws.scheduler.schedule-arn>"
  }

  # Each target's input: the job's message, with its firing (the placeholders, and the schedule's
  # own expression and zone, so that a daemon knows the next firing without reading the scheduler)
  # and origin "schedule"; a pipeline's root adds its pipeline (pipelines.tf). jsonencode writes <
  # and > as \u003c and \u003e, which EventBridge would not substitute: the two placeholders are
  # put back as they are, while a command's own < and > stay escaped, never taken for a
  # placeholder. The one place both engines' input is built, for each job with a schedule.
  job_inputs = {
    for key, message in local.job_messages : key => replace(replace(
      jsonencode(merge(message, {
        origin = "schedule"
        firing = merge(local.firing_placeholders, {
          expression = var.jobs[key].schedule_expression
          timezone   = var.schedule_engine == "rules" ? "UTC" : coalesce(var.jobs[key].schedule_expression_timezone, var.schedule_expression_timezone)
        })
      }, [for root, fields in local.pipeline_fields : fields if root == key]...)),
      replace(replace(local.firing_placeholders.time, "<", "\\u003c"), ">", "\\u003e"), local.firing_placeholders.time),
      replace(replace(local.firing_placeholders.schedule, "<", "\\u003c"), ">", "\\u003e"), local.firing_placeholders.schedule
    ) if var.jobs[key].schedule_expression != null
  }
}

locals {
  # The message group of each job on a FIFO queue: its event_id, with what SQS does not take in a
  # group id (anything but printable ASCII, space included) replaced by "_", as `sqsjkr send` does.
  message_groups = {
    for key, job in var.jobs : key => substr(replace(coalesce(job.event_id, key), "/[^!-~]/", "_"), 0, 128)
  }
}

resource "aws_cloudwatch_event_rule" "job" {
  for_each = local.rule_jobs

  name                = "${var.name}-${each.key}"
  description         = coalesce(each.value.description, "sqsjkr job ${each.key}")
  schedule_expression = each.value.schedule_expression
  # A disabled job keeps its rule, so turning it back on is a one-line change.
  state = each.value.enabled ? "ENABLED" : "DISABLED"
  tags  = var.tags

  lifecycle {
    precondition {
      condition     = length("${var.name}-${each.key}") <= 64
      error_message = "The rule name ${var.name}-${each.key} is longer than EventBridge's 64 characters: shorten the module's name or the job's key."
    }
    # Rules know neither time zones nor one-time schedules nor windows: refuse rather than drop.
    precondition {
      condition     = coalesce(each.value.schedule_expression_timezone, var.schedule_expression_timezone) == "UTC"
      error_message = "Job ${each.key} has a time zone other than UTC, and EventBridge rules run in UTC: use schedule_engine = \"scheduler\", or convert its schedule to UTC."
    }
    precondition {
      condition     = !startswith(each.value.schedule_expression, "at(") && each.value.flexible_time_window == null
      error_message = "Job ${each.key} uses at() or flexible_time_window, which only EventBridge Scheduler has: use schedule_engine = \"scheduler\"."
    }
    precondition {
      condition     = each.value.catch_up == null
      error_message = "Job ${each.key} sets catch_up, which reads EventBridge Scheduler's schedules: use schedule_engine = \"scheduler\"."
    }
  }
}

resource "aws_cloudwatch_event_target" "job" {
  for_each = local.rule_jobs

  rule      = aws_cloudwatch_event_rule.job[each.key].name
  target_id = "sqsjkr-queue"
  arn       = aws_sqs_queue.jobs.arn

  # The firing's time and rule, from the event (a scheduled event's time is the minute it was due).
  input_transformer {
    input_paths = {
      time = "$.time"
      rule = "$.resources[0]"
    }
    input_template = local.job_inputs[each.key]
  }

  dynamic "sqs_target" {
    for_each = var.fifo ? [local.message_groups[each.key]] : []

    content {
      message_group_id = sqs_target.value
    }
  }

  lifecycle {
    precondition {
      condition     = length(local.job_inputs[each.key]) <= 8192
      error_message = "The message of job ${each.key} is longer than the 8192 characters EventBridge allows as a target's input (a pipeline's root carries every step's message): move long commands into a script on the hosts."
    }
  }
}
