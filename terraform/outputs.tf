output "queue_url" {
  description = "URL of the job queue, for `aws sqs send-message` and `sqsjkr send`."
  value       = aws_sqs_queue.jobs.id
}

output "queue_arn" {
  description = "ARN of the job queue."
  value       = aws_sqs_queue.jobs.arn
}

output "queue_name" {
  description = "Name of the job queue: the daemon's [sqs] queue_name."
  value       = aws_sqs_queue.jobs.name
}

output "dlq_arn" {
  description = "ARN of the dead-letter queue; alarm on its ApproximateNumberOfMessagesVisible."
  value       = aws_sqs_queue.dlq.arn
}

output "dlq_url" {
  description = "URL of the dead-letter queue, to inspect or redrive what landed there."
  value       = aws_sqs_queue.dlq.id
}

output "schedule_dlq_arn" {
  description = "ARN of the queue of the schedules' dead letters (firings the scheduler could not deliver): the DLQ, or with fifo = true the standard <name>-scheduler-dlq, since the scheduler refuses a FIFO one."
  value       = local.schedule_dlq_arn
}

output "schedule_dlq_url" {
  description = "URL of the queue of the schedules' dead letters, for `sqsjkr dlq list --dlq NAME`."
  value       = var.fifo ? aws_sqs_queue.schedule_dlq[0].id : aws_sqs_queue.dlq.id
}

output "table_name" {
  description = "Name of the lock and dedupe table: the daemon's [lock] table (or --lock-table)."
  value       = aws_dynamodb_table.locks.name
}

output "table_arn" {
  description = "ARN of the lock and dedupe table."
  value       = aws_dynamodb_table.locks.arn
}

output "host_policy_arn" {
  description = "ARN of the IAM policy a batch host needs; attach it to the hosts' instance role."
  value       = aws_iam_policy.host.arn
}

output "rule_arns" {
  description = "ARN of each job's EventBridge rule, by job key (with schedule_engine = \"rules\")."
  value       = { for key, rule in aws_cloudwatch_event_rule.job : key => rule.arn }
}

output "job_messages" {
  description = "The message body each schedule or rule sends, by job key (`terraform output -json job_messages`): pass one to `sqsjkr send --body` to run a job now; a pipeline's root's starts its pipeline, a step's runs that job alone."
  value       = { for key, message in local.job_messages : key => jsonencode(merge(message, [for root, fields in local.pipeline_fields : fields if root == key]...)) }
  # Job envs may hold credentials; keep them out of plan and apply output.
  sensitive = true
}

output "schedule_arns" {
  description = "ARN of each job's EventBridge Scheduler schedule, by job key (with schedule_engine = \"scheduler\")."
  value       = { for key, schedule in aws_scheduler_schedule.job : key => schedule.arn }
}

output "schedule_group_name" {
  description = "The schedule group of the jobs and of `sqsjkr send --at`: the daemon config's [schedule] group."
  value       = aws_scheduler_schedule_group.jobs.name
}

output "scheduler_role_arn" {
  description = "The role EventBridge Scheduler assumes to put jobs on the queue: the config's [schedule] role_arn, for `sqsjkr send --at`."
  value       = aws_iam_role.scheduler.arn
}

output "sender_policy_arn" {
  description = "ARN of the IAM policy `sqsjkr send` needs (now, --at, --list-scheduled, --cancel); attach it to whoever runs jobs by hand."
  value       = aws_iam_policy.sender.arn
}

output "viewer_policy_arn" {
  description = "ARN of the read-only IAM policy for watching the fleet (status, history, daemons, schedules, locks, audit, dlq list, the web dashboard without actions)."
  value       = aws_iam_policy.viewer.arn
}

output "operator_policy_arn" {
  description = "ARN of the IAM policy for steering the fleet: the viewer's and the sender's rights, and pause, resume, unlock and the dead letters' commands, each audited."
  value       = aws_iam_policy.operator.arn
}
