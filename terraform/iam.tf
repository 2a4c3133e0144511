# The policy a batch host needs to run the daemon: attach it to the hosts' instance role.
# Nothing here allows sending jobs to the queue; that is the schedule rules' privilege.

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

  statement {
    sid    = "LocksAndDedupe"
    effect = "Allow"
    actions = [
      "dynamodb:PutItem",    # claim a message's dedupe record; take a lock (both conditional writes)
      "dynamodb:UpdateItem", # renew a held lock's lease; mark a job finished
      "dynamodb:GetItem",    # read a dedupe record's state when SQS delivers a message again
      "dynamodb:DeleteItem", # release a lock
    ]
    # The table only: the daemon never reads the index, which has an ARN of its own.
    resources = [aws_dynamodb_table.locks.arn]
  }
}

resource "aws_iam_policy" "host" {
  name        = "${var.name}-host"
  description = "Lets a batch host run the sqsjkr daemon on queue ${var.name} and table ${var.name}."
  policy      = data.aws_iam_policy_document.host.json
  tags        = var.tags
}
