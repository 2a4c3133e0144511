# The policies of the people (and the dashboards) who watch and steer the fleet: a read-only
# viewer, and an operator who may also act. Attach them to their roles or groups; hosts need
# neither (they hold the host policy) and senders need only the sender policy.

locals {
  # The index status, history, daemons, schedules and audit read items through: it has an ARN of
  # its own, and no read ever scans the table for them.
  index_arn = "${aws_dynamodb_table.locks.arn}/index/TypeExpiredIndex"
  # The module's recurring schedules and sqsjkr send's one-time ones, in its schedule group.
  schedules_arn = "${replace(aws_scheduler_schedule_group.jobs.arn, ":schedule-group/", ":schedule/")}/*"
  # The module's rules, with schedule_engine = "rules": the partition, region and account are the
  # queue's (arn:PARTITION:sqs:REGION:ACCOUNT:NAME), so no data source has to ask AWS for them.
  queue_arn_parts = split(":", aws_sqs_queue.jobs.arn)
  rules_arn       = format("arn:%s:events:%s:%s:rule/%s-*", local.queue_arn_parts[1], local.queue_arn_parts[3], local.queue_arn_parts[4], var.name)
}

# status, history, daemons, schedules, locks, audit, dlq list and dlq show: nothing that changes
# what the fleet runs.
data "aws_iam_policy_document" "viewer" {
  statement {
    sid    = "ReadTheTable"
    effect = "Allow"
    actions = [
      "dynamodb:GetItem",      # the item of pauses and routes; an event's summary (schedules, status)
      "dynamodb:Query",        # an event's runs (history); items of one Type through the index
      "dynamodb:BatchGetItem", # the items the index lists: summaries, daemons, audit entries
      "dynamodb:Scan",         # locks: every lock and group slot (they carry no Expired, so no index lists them)
    ]
    resources = [aws_dynamodb_table.locks.arn, local.index_arn]
  }

  statement {
    sid    = "ReadTheQueues"
    effect = "Allow"
    actions = [
      "sqs:GetQueueUrl",        # the queues of the config, by name
      "sqs:GetQueueAttributes", # the job queue's RedrivePolicy names its DLQ; queue ARNs for rules
    ]
    resources = concat([aws_sqs_queue.jobs.arn], local.dead_letter_arns)
  }

  statement {
    sid    = "PeekAtTheDeadLetters"
    effect = "Allow"
    actions = [
      "sqs:ReceiveMessage",          # dlq list and show read the dead letters and their reasons
      "sqs:ChangeMessageVisibility", # and make each visible again at once, left where it was
    ]
    resources = local.dead_letter_arns
  }

  statement {
    sid       = "ReadTheSchedules"
    effect    = "Allow"
    actions   = ["scheduler:GetSchedule"] # each schedule's expression, zone, state and job
    resources = [local.schedules_arn]
  }

  statement {
    sid    = "ListSchedulesAndRules"
    effect = "Allow"
    actions = [
      "scheduler:ListSchedules",      # the schedules of the group; it takes no resource
      "events:ListRuleNamesByTarget", # with rules: the rules that target the queue; no resource
    ]
    resources = ["*"]
  }

  statement {
    sid    = "ReadTheRules"
    effect = "Allow"
    actions = [
      "events:DescribeRule",      # with rules: a rule's expression and state
      "events:ListTargetsByRule", # and the job it sends
    ]
    resources = [local.rules_arn]
  }
}

resource "aws_iam_policy" "viewer" {
  name        = "${var.name}-viewer"
  description = "Lets its holder watch the sqsjkr fleet of queue ${var.name} and table ${var.name} (status, history, daemons, schedules, locks, audit, dlq list): read only."
  policy      = data.aws_iam_policy_document.viewer.json
  tags        = var.tags
}

# Everything the viewer may do, and the commands that steer the fleet: pause, resume, route,
# unlock, status --forget, dlq redrive, delete and purge, and sending jobs (the sender policy's
# rights, which trigger needs too: it sends a schedule's message to the queue).
# Every one of them writes an audit item first.
data "aws_iam_policy_document" "operator" {
  source_policy_documents = [
    data.aws_iam_policy_document.viewer.json,
    data.aws_iam_policy_document.sender.json,
  ]

  statement {
    sid    = "SteerTheFleet"
    effect = "Allow"
    actions = [
      "dynamodb:UpdateItem", # pause, resume and route (the item of pauses and routes); kill (the mark on a run's claim)
      "dynamodb:DeleteItem", # unlock; status --forget of an event
    ]
    resources = [aws_dynamodb_table.locks.arn]
  }

  statement {
    sid    = "HandleTheDeadLetters"
    effect = "Allow"
    actions = [
      "sqs:DeleteMessage", # dlq redrive (after the send), delete and purge
    ]
    resources = local.dead_letter_arns
  }
}

resource "aws_iam_policy" "operator" {
  name        = "${var.name}-operator"
  description = "Lets its holder watch and steer the sqsjkr fleet of queue ${var.name} and table ${var.name}: the viewer's and the sender's rights, pause, resume, route, trigger, unlock and the dead letters; each action audited."
  policy      = data.aws_iam_policy_document.operator.json
  tags        = var.tags
}
