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
  description = "ARN of each job's EventBridge rule, by job key."
  value       = { for key, rule in aws_cloudwatch_event_rule.job : key => rule.arn }
}

output "job_messages" {
  description = "The message body each rule sends, by job key (`terraform output -json job_messages`): pass one to `sqsjkr send --body` to run a job now."
  value       = { for key, message in local.job_messages : key => jsonencode(message) }
  # Job envs may hold credentials; keep them out of plan and apply output.
  sensitive = true
}
