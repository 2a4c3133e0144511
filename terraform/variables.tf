variable "name" {
  description = "Name of the queue and the table, and prefix of the DLQ (<name>-dlq), the host policy (<name>-host) and every schedule rule (<name>-<job key>). Use it as [sqs] queue_name and [lock] table in the daemon's config."
  type        = string
  default     = "sqsjkr"

  validation {
    # SQS queue names allow no dots, and a rule name (<name>-<job key>) stops at 64 characters.
    condition     = can(regex("^[0-9A-Za-z_-]{1,62}$", var.name))
    error_message = "name must be 1 to 62 letters, digits, '-' or '_'."
  }
}

variable "tags" {
  description = "Tags for every resource that takes them."
  type        = map(string)
  default     = {}
}

variable "jobs" {
  description = "The schedule: one EventBridge rule per entry, putting a job message on the queue. The map key names the rule (<name>-<key>) and is the job's event_id unless event_id is set. Durations use Go syntax (\"90s\", \"1h30m\")."
  type = map(object({
    schedule_expression       = string                    # "cron(0 3 * * ? *)" or "rate(5 minutes)"
    command                   = string                    # run as sh -c COMMAND
    envs                      = optional(map(string), {}) # added to the daemon's environment
    event_id                  = optional(string)          # defaults to the map key
    lock_id                   = optional(string)          # jobs sharing it never run at once
    life_time                 = optional(string)          # cancel it if not started this long after sending
    timeout                   = optional(string)          # kill the job after it has run this long
    abort_if_locked           = optional(bool, false)     # give up at once when the lock is held
    disable_life_time_trigger = optional(bool, false)     # no life_time trigger for this job
    enabled                   = optional(bool, true)      # false keeps the rule, DISABLED
    description               = optional(string)          # the rule's description
  }))
  default = {}

  validation {
    # The rule name is <name>-<key>; EventBridge allows these characters in it.
    condition     = alltrue([for key, job in var.jobs : can(regex("^[0-9A-Za-z._-]{1,62}$", key))])
    error_message = "Each jobs key must be 1 to 62 letters, digits, '.', '-' or '_' (it names an EventBridge rule)."
  }

  validation {
    # EventBridge wants a singular unit for 1 and a plural one above it, and six cron fields.
    condition = alltrue([
      for key, job in var.jobs :
      can(regex("^(rate\\((1 (minute|hour|day)|([2-9]|[1-9][0-9]+) (minutes|hours|days))\\)|cron\\([^ ()]+( [^ ()]+){5}\\))$", job.schedule_expression))
    ])
    error_message = "Each schedule_expression must be \"rate(1 hour)\", \"rate(N minutes|hours|days)\" or \"cron(min hour day-of-month month day-of-week year)\"."
  }

  validation {
    condition     = alltrue([for key, job in var.jobs : job.command != ""])
    error_message = "Each job needs a non-empty command."
  }

  validation {
    # The daemon refuses what a process environment cannot hold.
    condition = alltrue(flatten([
      for key, job in var.jobs : [for env in keys(job.envs) : can(regex("^[^=]+$", env))]
    ]))
    error_message = "envs names must be non-empty and must not contain '='."
  }

  validation {
    # An empty string would silently mean "the map key" or "no lock": say null instead.
    condition = alltrue([
      for key, job in var.jobs : job.event_id != "" && job.lock_id != ""
    ])
    error_message = "event_id and lock_id, when set, must not be empty."
  }

  validation {
    condition = alltrue([
      for key, job in var.jobs :
      job.life_time == null || can(regex("^([0-9]+(\\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$", job.life_time))
    ])
    error_message = "life_time must be a Go duration such as \"90s\", \"1h30m\" or \"1.5h\"."
  }

  validation {
    condition = alltrue([
      for key, job in var.jobs :
      job.timeout == null || can(regex("^([0-9]+(\\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$", job.timeout))
    ])
    error_message = "timeout must be a Go duration such as \"90s\", \"1h30m\" or \"1.5h\"."
  }
}

variable "visibility_timeout_seconds" {
  description = "The queue's default visibility timeout. The daemon sets its own on every receive ([sqs] visibility_timeout, default 30) and extends it while a job runs, so this only matters to other consumers such as the console."
  type        = number
  default     = 30

  validation {
    condition     = var.visibility_timeout_seconds >= 0 && var.visibility_timeout_seconds <= 43200
    error_message = "visibility_timeout_seconds must be between 0 and 43200 (12 hours)."
  }
}

variable "message_retention_seconds" {
  description = "How long the queue keeps a job message. The daemon also keeps each message's dedupe record this long, so a redelivery within it is recognised."
  type        = number
  default     = 345600 # 4 days, the SQS default

  validation {
    condition     = var.message_retention_seconds >= 60 && var.message_retention_seconds <= 1209600
    error_message = "message_retention_seconds must be between 60 and 1209600 (14 days)."
  }
}

variable "dlq_message_retention_seconds" {
  description = "How long the dead-letter queue keeps messages. Must not be shorter than message_retention_seconds: a standard queue's message keeps its first enqueue time in the DLQ, so a shorter retention would drop it at once."
  type        = number
  default     = 1209600 # 14 days, the SQS maximum

  validation {
    condition     = var.dlq_message_retention_seconds >= 60 && var.dlq_message_retention_seconds <= 1209600
    error_message = "dlq_message_retention_seconds must be between 60 and 1209600 (14 days)."
  }
}

variable "max_receive_count" {
  description = "Receives after which SQS moves a message to the DLQ (the redrive policy's maxReceiveCount). A message is received again when a host dies mid-job or gives it back."
  type        = number
  default     = 5

  validation {
    condition     = var.max_receive_count >= 1 && var.max_receive_count <= 1000 && floor(var.max_receive_count) == var.max_receive_count
    error_message = "max_receive_count must be a whole number between 1 and 1000."
  }
}

variable "billing_mode" {
  description = "The table's billing mode: PAY_PER_REQUEST (a few writes per job suit it) or PROVISIONED (then read_capacity and write_capacity apply, to the table and its index)."
  type        = string
  default     = "PAY_PER_REQUEST"

  validation {
    condition     = contains(["PAY_PER_REQUEST", "PROVISIONED"], var.billing_mode)
    error_message = "billing_mode must be PAY_PER_REQUEST or PROVISIONED."
  }
}

variable "read_capacity" {
  description = "Read capacity units of the table and of its index, with billing_mode = PROVISIONED."
  type        = number
  default     = 5
}

variable "write_capacity" {
  description = "Write capacity units of the table and of its index, with billing_mode = PROVISIONED."
  type        = number
  default     = 5
}

variable "index_projection_type" {
  description = "Projection of the TypeExpiredIndex GSI. KEYS_ONLY is enough for the Go daemon's hourly sweep; set ALL when importing a table the Go example created with ALL, so that terraform does not rebuild the index."
  type        = string
  default     = "KEYS_ONLY"

  validation {
    condition     = contains(["KEYS_ONLY", "ALL"], var.index_projection_type)
    error_message = "index_projection_type must be KEYS_ONLY or ALL."
  }
}

variable "point_in_time_recovery" {
  description = "Turn on DynamoDB point-in-time recovery for the table. Its items are short-lived (dedupe records and held locks), so most deployments leave it off."
  type        = bool
  default     = false
}
