# The policy a batch host needs to run the daemon (attach it to the hosts' instance role), and
# the one a person or CI needs to send jobs by hand. Hosts send to the queue only to forward the
# messages of events routed to it (sqsjkr route), which a schedule or a person sent before.

data "aws_iam_policy_document" "host" {
  statement {
    sid    = "ReadTheJobQueue"
    effect = "Allow"
    actions = [
      "sqs:GetQueueUrl",             # startup: the URL of [sqs] queue_name
      "sqs:GetQueueAttributes",      # startup: MessageRetentionPeriod and RedrivePolicy
      "sqs:ReceiveMessage",          # take jobs
      "sqs:DeleteMessage",           # done with a message; covers DeleteMessageBatch
      "sqs:ChangeMessageVisibility", # heartbeat, give back unstarted; covers the Batch call
    ]
    resources = [aws_sqs_queue.jobs.arn]
  }

  statement {
    sid    = "MoveMalformedMessagesToTheDLQ"
    effect = "Allow"
    actions = [
      "sqs:GetQueueUrl", # the DLQ's URL, from the ARN in the job queue's RedrivePolicy
      "sqs:SendMessage", # a message that is not a valid job is kept here instead of being lost
    ]
    resources = [aws_sqs_queue.dlq.arn]
  }

  # sqsjkr route: a daemon that receives a routed event's message on another queue of the fleet
  # sends it on to the queue its route names. With several queues, each made by this module with
  # its host policy on the hosts, every queue of the fleet can be a route's queue.
  statement {
    sid    = "ForwardRoutedJobs"
    effect = "Allow"
    actions = [
      "sqs:GetQueueUrl", # the URL of the queue a route names, once per queue
      "sqs:SendMessage", # forward a routed event's message here from another queue (sqsjkr route)
    ]
    resources = [aws_sqs_queue.jobs.arn]
  }

  statement {
    sid    = "LocksAndDedupe"
    effect = "Allow"
    actions = [
      "dynamodb:PutItem",      # claim a message's dedupe record; take a lock or a group slot (conditional writes, also in transactions); write the daemon's own item (sqsjkr daemons) and a running job's live output (history --follow)
      "dynamodb:UpdateItem",   # renew a lease (it reads a kill request of sqsjkr kill); release a lock or a slot; mark a job finished; record its run; end a killed run whose holder died
      "dynamodb:GetItem",      # read a dedupe record's state when SQS delivers a message again; read pauses and routes
      "dynamodb:DeleteItem",   # give up the dedupe claim of a job that did not start; delete a run's live output item when it ends (in the run's final transaction)
      "dynamodb:Query",        # read a concurrency group's slots (jobs with concurrency_key)
      "dynamodb:BatchGetItem", # catch-up: which firings of the schedules with catch_up have a claim
    ]
    # The table only: the daemon never reads the index, which has an ARN of its own.
    resources = [aws_dynamodb_table.locks.arn]
  }

  # Catch-up ([schedule] catch_up_interval): the daemon holding the fleet's catch-up lease reads
  # the group's schedules to find those with catch_up, their expressions and their messages.
  statement {
    sid       = "CatchUpReadsTheSchedules"
    effect    = "Allow"
    actions   = ["scheduler:GetSchedule"] # a schedule new or changed since it was last read
    resources = ["${replace(aws_scheduler_schedule_group.jobs.arn, ":schedule-group/", ":schedule/")}/*"]
  }

  statement {
    sid       = "CatchUpListsTheSchedules"
    effect    = "Allow"
    actions   = ["scheduler:ListSchedules"] # each look: the group's schedules; it takes no resource
    resources = ["*"]
  }
}

resource "aws_iam_policy" "host" {
  name        = "${var.name}-host"
  description = "Lets a batch host run the sqsjkr daemon on queue ${var.name} and table ${var.name}."
  policy      = data.aws_iam_policy_document.host.json
  tags        = var.tags
}

# What `sqsjkr send` needs, for whoever runs jobs by hand (people, CI): send a job now, or schedule
# one for later (--at, --in), list those (--list-scheduled) and cancel one (--cancel).
data "aws_iam_policy_document" "sender" {
  statement {
    sid    = "SendJobsNow"
    effect = "Allow"
    actions = [
      "sqs:GetQueueUrl",        # the URL of [sqs] queue_name
      "sqs:GetQueueAttributes", # --at: the queue's ARN and DLQ for the schedule's target
      "sqs:SendMessage",        # the job
    ]
    resources = [aws_sqs_queue.jobs.arn]
  }

  statement {
    sid    = "OneTimeSchedules"
    effect = "Allow"
    actions = [
      "scheduler:CreateSchedule", # --at, --in
      "scheduler:GetSchedule",    # --list-scheduled: when each runs, and its job
      "scheduler:DeleteSchedule", # --cancel
    ]
    # sqsjkr names its one-time schedules at.<...>; the module's recurring ones stay out of reach.
    resources = ["${replace(aws_scheduler_schedule_group.jobs.arn, ":schedule-group/", ":schedule/")}/at.*"]
  }

  statement {
    sid       = "ListSchedules"
    effect    = "Allow"
    actions   = ["scheduler:ListSchedules"] # --list-scheduled; it takes no resource
    resources = ["*"]
  }

  statement {
    sid       = "AuditTrail"
    effect    = "Allow"
    actions   = ["dynamodb:PutItem"] # each send (and --cancel) is written to the audit trail first
    resources = [aws_dynamodb_table.locks.arn]

    # Audit items only: their Ids start with audit:, so the sender cannot touch a lock or a claim.
    condition {
      test     = "ForAllValues:StringLike"
      variable = "dynamodb:LeadingKeys" # the partition key (Id) of every item written
      values   = ["audit:*"]
    }
  }

  statement {
    sid    = "UniqueSends"
    effect = "Allow"
    actions = [
      "dynamodb:PutItem",    # --unique-for: hold the job's uniqueness item
      "dynamodb:UpdateItem", # --unique-for: name the message sent in it
      "dynamodb:DeleteItem", # --unique-for: give it up when the send failed
    ]
    resources = [aws_dynamodb_table.locks.arn]

    # Uniqueness items only (Ids unique:<hash of queue and body>), not a lock or a claim.
    condition {
      test     = "ForAllValues:StringLike"
      variable = "dynamodb:LeadingKeys" # the partition key (Id) of every item written
      values   = ["unique:*"]
    }
  }

  statement {
    sid    = "FollowTheirJobs"
    effect = "Allow"
    actions = [
      "dynamodb:GetItem",      # --wait, --unique-for: the job's claim and its event's summary
      "dynamodb:Query",        # --wait: its event's runs; the summaries through TypeExpiredIndex
      "dynamodb:BatchGetItem", # the summaries the index lists
    ]
    resources = [aws_dynamodb_table.locks.arn, "${aws_dynamodb_table.locks.arn}/index/TypeExpiredIndex"]
  }

  statement {
    sid       = "LetTheSchedulesSend"
    effect    = "Allow"
    actions   = ["iam:PassRole"] # a schedule created with --at runs as the scheduler role
    resources = [aws_iam_role.scheduler.arn]

    condition {
      test     = "StringEquals"
      variable = "iam:PassedToService"
      values   = ["scheduler.amazonaws.com"]
    }
  }
}

resource "aws_iam_policy" "sender" {
  name        = "${var.name}-sender"
  description = "Lets its holder run sqsjkr send on queue ${var.name}: jobs now, and one-time schedules in group ${var.name}."
  policy      = data.aws_iam_policy_document.sender.json
  tags        = var.tags
}
