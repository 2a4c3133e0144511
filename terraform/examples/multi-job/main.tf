# A batch fleet's schedule on sqsjkr: the queue, table and schedules from the module, and the
# host policy attached to the role the batch hosts already run with.
#
#   terraform init && terraform apply
#   terraform output -raw sqsjkr_config   # the deployment's part of /etc/sqsjkr/config.toml
#
# Jobs converted from a crontab join the ones below:
#
#   sqsjkr crontab2tf /etc/crontab --system --timezone Asia/Tokyo -o crontab.tfvars
#   terraform apply -var-file=crontab.tfvars

terraform {
  required_version = ">= 1.3"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.27, < 7.0"
    }
  }
}

variable "region" {
  description = "Region of the queue, the table and the schedule."
  type        = string
  default     = "ap-northeast-1"
}

variable "batch_host_role_name" {
  description = "Name of the IAM role in the batch hosts' instance profile."
  type        = string
  default     = "batch-host"
}

variable "jobs" {
  description = "More jobs, with the attributes of the module's jobs, merged over the ones below (a key of both takes these): the output of `sqsjkr crontab2tf ... -o crontab.tfvars`, given as `terraform apply -var-file=crontab.tfvars`."
  # The module checks each job's attributes; `any` lets jobs with different attributes through.
  type    = any
  default = {}
}

provider "aws" {
  region = var.region
}

data "aws_caller_identity" "current" {}

locals {
  # Times are Tokyo's (the module's schedule_expression_timezone below), unless a job says.
  jobs = {
    nightly-db-backup = {
      description         = "Nightly logical backup of the app database to S3"
      schedule_expression = "cron(0 3 * * ? *)"
      command             = "/opt/batch/bin/db-backup --database app --to \"s3://$BACKUP_BUCKET/app/$(date +%F)\""
      envs = {
        PGHOST        = "app-db.internal.example.com"
        PGUSER        = "backup"
        BACKUP_BUCKET = "example-db-backups"
      }
      # Shares its lock with the weekly vacuum: the two never run against the database at once.
      lock_id = "app-db-maintenance"
      # Not started within an hour (hosts down, lock held by a long vacuum): skip this night and
      # run the life_time trigger, which pages someone.
      life_time = "1h"
      timeout   = "3h"
    }

    weekly-db-vacuum = {
      description         = "VACUUM ANALYZE of the app database, Sunday 04:30 in Tokyo"
      schedule_expression = "cron(30 4 ? * SUN *)"
      command             = "/opt/batch/bin/db-vacuum --database app --analyze"
      envs = {
        PGHOST = "app-db.internal.example.com"
        PGUSER = "maintenance"
      }
      lock_id   = "app-db-maintenance"
      life_time = "2h"
      timeout   = "4h"
    }

    hourly-sales-report = {
      schedule_expression = "cron(5 * * * ? *)"
      command             = "/opt/batch/bin/sales-report --period last-hour --format csv"
      envs = {
        REPORT_TZ     = "Asia/Tokyo"
        REPORT_BUCKET = "example-reports"
      }
      event_id = "sales-report-hourly"
      lock_id  = "sales-report"
      # If last hour's report is still running, this one is skipped rather than queued behind it.
      abort_if_locked = true
      life_time       = "50m"
      timeout         = "55m"
      # Any time in the first ten minutes will do: the scheduler spreads such jobs out.
      flexible_time_window = 10
    }

    expire-upload-sessions = {
      schedule_expression = "rate(5 minutes)"
      command             = "/opt/batch/bin/expire-upload-sessions --older-than 30m"
      lock_id             = "expire-upload-sessions"
      abort_if_locked     = true
      life_time           = "4m30s"
      # The next run comes five minutes later: a missed one is not worth an alert.
      disable_life_time_trigger = true
    }

    search-reindex = {
      description         = "Incremental reindex of the search cluster, every two hours"
      schedule_expression = "cron(15 0/2 * * ? *)"
      command             = "/opt/batch/bin/search-reindex --incremental"
      # A concurrency group: at most two jobs of the key run at once across all hosts, where a
      # lock_id allows one. Other jobs that load the cluster would name the same key.
      concurrency_key   = "search-cluster"
      concurrency_limit = 2
      # An errored or timed-out run is run again, up to three times, 2, 4 and then 8 minutes
      # later; the final failure is what the reporters and `sqsjkr status` see.
      retries     = 3
      retry_delay = "2m"
      timeout     = "30m"
    }

    # An HTTP job: whichever host receives it calls the app on that same host, as the daemon's
    # default [http] allow (loopback only) permits. 200 and 409 (already warm) count as success.
    warm-api-cache = {
      schedule_expression = "rate(15 minutes)"
      http = {
        url            = "http://127.0.0.1:8080/internal/cache/warm"
        method         = "POST"
        headers        = { "Content-Type" = "application/json" }
        body           = "{\"scope\": \"catalog\"}"
        timeout        = "2m"
        success_status = [200, 409]
      }
      life_time = "10m"
      retries   = 1
    }

    legacy-partner-export = {
      description         = "Monthly export for the old partner API; off until they confirm the new endpoint"
      schedule_expression = "cron(0 0 1 * ? *)"
      # The partner's month ends at midnight UTC, not Tokyo's.
      schedule_expression_timezone = "UTC"
      command                      = "/opt/batch/bin/partner-export --month previous"
      enabled                      = false
    }
  }
}

module "sqsjkr" {
  source = "../.."

  name = "batch-jobs"
  tags = {
    Service = "batch"
    Owner   = "ops"
  }

  # EventBridge Scheduler (the default engine) reads the jobs' times in Tokyo time.
  schedule_expression_timezone = "Asia/Tokyo"

  jobs = merge(local.jobs, var.jobs)
}

# The hosts' role gets exactly what the daemon needs, from the module's policy.
resource "aws_iam_role_policy_attachment" "sqsjkr_host" {
  role       = var.batch_host_role_name
  policy_arn = module.sqsjkr.host_policy_arn
}

output "sqsjkr_config" {
  description = "The keys of /etc/sqsjkr/config.toml that depend on this deployment."
  value = join("\n", [
    "[account]",
    "id = \"${data.aws_caller_identity.current.account_id}\"",
    "region = \"${var.region}\"",
    "",
    "[sqs]",
    "queue_name = \"${module.sqsjkr.queue_name}\"",
    "",
    "[lock]",
    "table = \"${module.sqsjkr.table_name}\"",
    "",
    "[schedule]",
    "role_arn = \"${module.sqsjkr.scheduler_role_arn}\"",
    "group = \"${module.sqsjkr.schedule_group_name}\"",
    "timezone = \"Asia/Tokyo\"",
    "",
  ])
}

output "dlq_arn" {
  description = "Alarm on this queue's ApproximateNumberOfMessagesVisible: messages that were not valid jobs, or kept failing."
  value       = module.sqsjkr.dlq_arn
}
