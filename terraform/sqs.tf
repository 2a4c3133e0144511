# The job queue, its dead-letter queue and who may send to the queue.

locals {
  # SQS requires a FIFO queue's name to end in .fifo, and a FIFO queue's DLQ to be FIFO too.
  queue_suffix = var.fifo ? ".fifo" : ""
  # Where each schedule's dead letters go (a firing the scheduler could not deliver): the job
  # queue's own DLQ, or with fifo = true a standard queue of their own.
  schedule_dlq_arn = var.fifo ? aws_sqs_queue.schedule_dlq[0].arn : aws_sqs_queue.dlq.arn
  # The queues `sqsjkr dlq` reads: the DLQ, and the schedules' own when there is one.
  dead_letter_arns = concat([aws_sqs_queue.dlq.arn], aws_sqs_queue.schedule_dlq[*].arn)
}

resource "aws_sqs_queue" "dlq" {
  name                      = "${var.name}-dlq${local.queue_suffix}"
  fifo_queue                = var.fifo
  message_retention_seconds = var.dlq_message_retention_seconds
  # SQS-managed keys: EventBridge cannot send to a queue under the AWS-managed KMS key, and a
  # customer key would need kms: grants for both EventBridge and the hosts.
  sqs_managed_sse_enabled = true
  tags                    = var.tags
}

# EventBridge Scheduler refuses a FIFO queue as a schedule's dead-letter queue: with fifo = true
# the schedules' dead letters go to this standard queue (<name>-scheduler-dlq).
resource "aws_sqs_queue" "schedule_dlq" {
  count = var.fifo ? 1 : 0

  name                      = "${var.name}-scheduler-dlq"
  message_retention_seconds = var.dlq_message_retention_seconds
  sqs_managed_sse_enabled   = true
  tags                      = var.tags
}

# Only the scheduler's role (the role its schedules send with) may send to it.
data "aws_iam_policy_document" "schedule_dlq" {
  count = var.fifo ? 1 : 0

  statement {
    sid       = "SchedulerRoleOfThisModule"
    effect    = "Allow"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.schedule_dlq[0].arn]

    principals {
      type        = "AWS"
      identifiers = [aws_iam_role.scheduler.arn]
    }
  }
}

resource "aws_sqs_queue_policy" "schedule_dlq" {
  count = var.fifo ? 1 : 0

  queue_url = aws_sqs_queue.schedule_dlq[0].id
  policy    = data.aws_iam_policy_document.schedule_dlq[0].json
}

resource "aws_sqs_queue" "jobs" {
  name       = "${var.name}${local.queue_suffix}"
  fifo_queue = var.fifo
  # EventBridge Scheduler sends to a FIFO queue only with content-based deduplication: a message
  # with the same body as one sent in the last 5 minutes is dropped (see the variable fifo).
  content_based_deduplication = var.fifo ? true : null
  visibility_timeout_seconds  = var.visibility_timeout_seconds
  message_retention_seconds   = var.message_retention_seconds
  sqs_managed_sse_enabled     = true

  # A message that keeps coming back (hosts dying mid-job, a job that never gets its lock) ends
  # up in the DLQ instead of cycling for the whole retention period.
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dlq.arn
    maxReceiveCount     = var.max_receive_count
  })

  tags = var.tags

  lifecycle {
    precondition {
      condition     = var.dlq_message_retention_seconds >= var.message_retention_seconds
      error_message = "dlq_message_retention_seconds must be at least message_retention_seconds: a message moved to the DLQ keeps its first enqueue time."
    }
    # No limit on how often a job of a FIFO queue fires: each schedule's body carries its firing's
    # time, so content-based deduplication drops only repeated deliveries of one firing.
  }
}

# Only the job queue may use the DLQ as its dead-letter queue. A separate resource because the
# DLQ would otherwise reference the queue that references it.
resource "aws_sqs_queue_redrive_allow_policy" "dlq" {
  queue_url = aws_sqs_queue.dlq.id
  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.jobs.arn]
  })
}

# Who may send to the queue: the role of this module's schedule group (its recurring schedules
# and `sqsjkr send --at`), and EventBridge on behalf of this module's rules. Another rule or
# schedule in the account, or in someone else's, cannot start commands on the batch hosts.
data "aws_iam_policy_document" "queue" {
  statement {
    sid       = "SchedulerRoleOfThisModule"
    effect    = "Allow"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.jobs.arn]

    principals {
      type        = "AWS"
      identifiers = [aws_iam_role.scheduler.arn]
    }
  }

  # An ArnEquals condition with no ARNs is refused, and without rules nobody needs it.
  dynamic "statement" {
    for_each = length(local.rule_jobs) > 0 ? [1] : []

    content {
      sid       = "ScheduleRulesOfThisModule"
      effect    = "Allow"
      actions   = ["sqs:SendMessage"]
      resources = [aws_sqs_queue.jobs.arn]

      principals {
        type        = "Service"
        identifiers = ["events.amazonaws.com"]
      }

      condition {
        test     = "ArnEquals"
        variable = "aws:SourceArn"
        values   = [for rule in aws_cloudwatch_event_rule.job : rule.arn]
      }
    }
  }
}

resource "aws_sqs_queue_policy" "jobs" {
  queue_url = aws_sqs_queue.jobs.id
  policy    = data.aws_iam_policy_document.queue.json
}

# Before the scheduler, the policy existed only with jobs: keep it rather than replace it.
moved {
  from = aws_sqs_queue_policy.jobs[0]
  to   = aws_sqs_queue_policy.jobs
}
