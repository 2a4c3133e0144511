# EventBridge Scheduler: the module's schedule group, the role the scheduler assumes to send to
# the queue, and one schedule per job (with schedule_engine = "scheduler"). The group and the role
# exist with either engine: `sqsjkr send --at` creates its one-time schedules in the group.

resource "aws_scheduler_schedule_group" "jobs" {
  name = var.name
  tags = var.tags
}

# Only EventBridge Scheduler, and only for schedules of this module's group, may assume the role:
# a schedule elsewhere in the account cannot borrow it to start commands on the batch hosts.
data "aws_iam_policy_document" "scheduler_trust" {
  statement {
    sid     = "SchedulesOfThisGroup"
    effect  = "Allow"
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["scheduler.amazonaws.com"]
    }

    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [aws_scheduler_schedule_group.jobs.arn]
    }
  }
}

resource "aws_iam_role" "scheduler" {
  name               = "${var.name}-scheduler"
  description        = "Assumed by EventBridge Scheduler to put sqsjkr jobs on queue ${var.name}."
  assume_role_policy = data.aws_iam_policy_document.scheduler_trust.json
  tags               = var.tags

  lifecycle {
    precondition {
      condition     = length("${var.name}-scheduler") <= 64
      error_message = "The role name ${var.name}-scheduler is longer than IAM's 64 characters: use a name of at most 54 characters."
    }
  }
}

data "aws_iam_policy_document" "scheduler" {
  statement {
    sid       = "PutJobsOnTheQueue"
    effect    = "Allow"
    actions   = ["sqs:SendMessage"] # a schedule's target: the job message
    resources = [aws_sqs_queue.jobs.arn]
  }

  statement {
    sid       = "DeadLetterEvents"
    effect    = "Allow"
    actions   = ["sqs:SendMessage"] # a job the scheduler could not put on the queue, after its retries
    resources = [local.schedule_dlq_arn]
  }
}

resource "aws_iam_role_policy" "scheduler" {
  name   = "send-jobs"
  role   = aws_iam_role.scheduler.id
  policy = data.aws_iam_policy_document.scheduler.json
}

resource "aws_scheduler_schedule" "job" {
  for_each = local.scheduler_jobs

  name                         = "${var.name}-${each.key}"
  group_name                   = aws_scheduler_schedule_group.jobs.name
  description                  = coalesce(each.value.description, "sqsjkr job ${each.key}")
  schedule_expression          = each.value.schedule_expression
  schedule_expression_timezone = coalesce(each.value.schedule_expression_timezone, var.schedule_expression_timezone)
  # A disabled job keeps its schedule, so turning it back on is a one-line change.
  state = each.value.enabled ? "ENABLED" : "DISABLED"

  flexible_time_window {
    mode                      = each.value.flexible_time_window == null ? "OFF" : "FLEXIBLE"
    maximum_window_in_minutes = each.value.flexible_time_window
  }

  target {
    arn      = aws_sqs_queue.jobs.arn
    role_arn = aws_iam_role.scheduler.arn
    input    = local.job_inputs[each.key]

    # A FIFO queue needs each message's group: the job's own, so that its runs keep their order.
    dynamic "sqs_parameters" {
      for_each = var.fifo ? [local.message_groups[each.key]] : []

      content {
        message_group_id = sqs_parameters.value
      }
    }

    retry_policy {
      maximum_event_age_in_seconds = var.retry_policy.maximum_event_age_in_seconds
      maximum_retry_attempts       = var.retry_policy.maximum_retry_attempts
    }

    # The job queue's own DLQ, so that alarms on it see firings that never reached the queue
    # too; with fifo = true a standard queue of its own: the Scheduler refuses a FIFO DLQ.
    dead_letter_config {
      arn = local.schedule_dlq_arn
    }
  }

  # The role's policy must exist before a schedule first fires.
  depends_on = [aws_iam_role_policy.scheduler]

  lifecycle {
    precondition {
      condition     = length("${var.name}-${each.key}") <= 64
      error_message = "The schedule name ${var.name}-${each.key} is longer than EventBridge Scheduler's 64 characters: shorten the module's name or the job's key."
    }
    precondition {
      condition     = length(local.job_inputs[each.key]) <= 8192
      error_message = "The message of job ${each.key} is longer than the 8192 characters EventBridge Scheduler allows as a target's input (a pipeline's root carries every step's message): move long commands into a script on the hosts."
    }
  }
}
