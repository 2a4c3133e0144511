variable "name" {
  description = "Name of the queue, the table and the schedule group, and prefix of the DLQ (<name>-dlq), the policies (<name>-host, <name>-sender), the scheduler role (<name>-scheduler) and every schedule or rule (<name>-<job key>). Use it as [sqs] queue_name, [lock] table and [schedule] group in the daemon's config."
  type        = string
  default     = "sqsjkr"

  validation {
    # SQS queue names allow no dots (so no schedule of the module starts like sqsjkr send's
    # "at." ones), and a schedule or rule name (<name>-<job key>) stops at 64 characters.
    condition     = can(regex("^[0-9A-Za-z_-]{1,62}$", var.name))
    error_message = "name must be 1 to 62 letters, digits, '-' or '_'."
  }
}

variable "tags" {
  description = "Tags for every resource that takes them."
  type        = map(string)
  default     = {}
}

variable "schedule_engine" {
  description = "What puts the jobs on the queue: \"scheduler\" (EventBridge Scheduler, one schedule per job in the module's schedule group, in any IANA time zone) or \"rules\" (one EventBridge rule per job, in UTC: the module's engine before Scheduler, kept for migrating)."
  type        = string
  default     = "scheduler"

  validation {
    condition     = contains(["scheduler", "rules"], var.schedule_engine)
    error_message = "schedule_engine must be \"scheduler\" or \"rules\"."
  }
}

variable "schedule_expression_timezone" {
  description = "IANA time zone of the jobs' cron() and at() expressions, unless a job sets its own (e.g. \"Asia/Tokyo\"); EventBridge Scheduler follows its daylight saving time. With schedule_engine = \"rules\" it must stay \"UTC\": rules run in UTC."
  type        = string
  default     = "UTC"

  validation {
    condition     = can(regex("^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$", var.schedule_expression_timezone))
    error_message = "schedule_expression_timezone must be an IANA time zone name such as \"UTC\" or \"Asia/Tokyo\"."
  }
}

variable "retry_policy" {
  description = "How long, and how often, EventBridge Scheduler retries putting a job on the queue when SQS refuses it, before it gives up and sends a dead-letter event to the DLQ. A job is run by whichever daemon receives it, so a late retry still runs it (unless the job's life_time has passed by then)."
  type = object({
    maximum_event_age_in_seconds = optional(number, 86400) # 60 to 86400
    maximum_retry_attempts       = optional(number, 185)   # 0 to 185
  })
  default = {}

  validation {
    condition     = var.retry_policy.maximum_event_age_in_seconds >= 60 && var.retry_policy.maximum_event_age_in_seconds <= 86400
    error_message = "retry_policy.maximum_event_age_in_seconds must be between 60 and 86400 (24 hours)."
  }

  validation {
    condition     = var.retry_policy.maximum_retry_attempts >= 0 && var.retry_policy.maximum_retry_attempts <= 185
    error_message = "retry_policy.maximum_retry_attempts must be between 0 and 185."
  }
}

variable "jobs" {
  description = "The schedule: one EventBridge Scheduler schedule (or, with schedule_engine = \"rules\", one EventBridge rule) per entry with a schedule_expression, putting a job message on the queue. The map key names the schedule or rule (<name>-<key>) and is the job's event_id unless event_id is set. Each job has a command or an http call. Durations use Go syntax (\"90s\", \"1h30m\"). A job may instead run `after` other jobs of the module (a pipeline: docs/pipelines.md), or only as some job's `on_failure`: it then has no schedule of its own, and the whole pipeline travels in its scheduled root's message."
  type = map(object({
    schedule_expression       = optional(string)          # "cron(0 3 * * ? *)" or "rate(5 minutes)"; none with after
    command                   = optional(string)          # run as sh -c COMMAND (or give http)
    envs                      = optional(map(string), {}) # added to the daemon's environment
    event_id                  = optional(string)          # defaults to the map key
    lock_id                   = optional(string)          # jobs sharing it never run at once
    life_time                 = optional(string)          # cancel it if not started this long after sending
    timeout                   = optional(string)          # kill the job after it has run this long
    abort_if_locked           = optional(bool, false)     # give up at once when the lock is held
    disable_life_time_trigger = optional(bool, false)     # no life_time trigger for this job
    concurrency_key           = optional(string)          # at most concurrency_limit jobs of a key at once
    concurrency_limit         = optional(number)          # 1 to 1000; the daemon's default is 1
    retries                   = optional(number)          # run an errored or timed-out job again, 0 to 100 times
    retry_delay               = optional(string)          # first wait before a retry, doubling; the daemon's default is 1m
    # An HTTP call the daemon makes instead of a command (to a URL under its [http] allow):
    http = optional(object({
      url            = string                 # http:// or https://
      method         = optional(string)       # GET, POST (the daemon's default), PUT, PATCH, DELETE, HEAD
      headers        = optional(map(string))  # request headers
      body           = optional(string)       # request body
      timeout        = optional(string)       # give up on the call after this long
      success_status = optional(list(number)) # statuses that succeed, instead of any 2xx
    }))
    # A pipeline (docs/pipelines.md): run once each job of the module named here has succeeded
    # for the same firing of the pipeline's scheduled root, instead of on a schedule; run the
    # jobs named in on_failure (jobs without a schedule_expression) if this one fails for good.
    after       = optional(list(string), [])
    on_failure  = optional(list(string), [])
    enabled     = optional(bool, true) # false keeps the schedule or rule, DISABLED
    description = optional(string)     # the schedule's or rule's description
    # EventBridge Scheduler only:
    schedule_expression_timezone = optional(string) # default: var.schedule_expression_timezone
    flexible_time_window         = optional(number) # minutes it may run late, to spread load
    catch_up                     = optional(string) # run a missed firing younger than this once, late ("6h"; at most "7d")
  }))
  default = {}

  validation {
    # The rule name is <name>-<key>; EventBridge allows these characters in it.
    condition     = alltrue([for key, job in var.jobs : can(regex("^[0-9A-Za-z._-]{1,62}$", key))])
    error_message = "Each jobs key must be 1 to 62 letters, digits, '.', '-' or '_' (it names a schedule or an EventBridge rule)."
  }

  validation {
    # EventBridge wants a singular unit for 1 and a plural one above it, and six cron fields;
    # at() is a one-time schedule, for EventBridge Scheduler only.
    condition = alltrue([
      for key, job in var.jobs :
      can(regex("^(rate\\((1 (minute|hour|day)|([2-9]|[1-9][0-9]+) (minutes|hours|days))\\)|cron\\([^ ()]+( [^ ()]+){5}\\)|at\\([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\))$", job.schedule_expression)) if job.schedule_expression != null
    ])
    error_message = "Each schedule_expression must be \"rate(1 hour)\", \"rate(N minutes|hours|days)\", \"cron(min hour day-of-month month day-of-week year)\" or (EventBridge Scheduler only) \"at(yyyy-mm-ddThh:mm:ss)\"."
  }

  validation {
    condition = alltrue([
      for key, job in var.jobs :
      job.schedule_expression_timezone == null || can(regex("^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$", job.schedule_expression_timezone))
    ])
    error_message = "schedule_expression_timezone, when set, must be an IANA time zone name such as \"UTC\" or \"Europe/Berlin\"."
  }

  validation {
    condition = alltrue([
      for key, job in var.jobs :
      job.flexible_time_window == null || try(job.flexible_time_window >= 1 && job.flexible_time_window <= 1440 && floor(job.flexible_time_window) == job.flexible_time_window, false)
    ])
    error_message = "flexible_time_window, when set, must be a whole number of minutes between 1 and 1440."
  }

  validation {
    condition     = alltrue([for key, job in var.jobs : job.command != null || job.http != null])
    error_message = "Each job needs a command or an http call."
  }

  validation {
    condition     = alltrue([for key, job in var.jobs : job.command == null || job.http == null])
    error_message = "A job has either a command or an http call, not both."
  }

  validation {
    condition     = alltrue([for key, job in var.jobs : job.command != ""])
    error_message = "Each job needs a non-empty command."
  }

  # A pipeline's graph (docs/pipelines.md); pipelines.tf checks what needs the whole graph (a
  # cycle, one scheduled root per pipeline, its size and its root's message).
  validation {
    condition = alltrue(flatten([
      for key, job in var.jobs : [for name in concat(job.after, job.on_failure) : contains(keys(var.jobs), name)]
    ]))
    error_message = "after and on_failure must name jobs of this module: ${join("; ", [for key, job in var.jobs : "job ${key} names ${join(", ", [for name in concat(job.after, job.on_failure) : name if !contains(keys(var.jobs), name)])}" if !alltrue([for name in concat(job.after, job.on_failure) : contains(keys(var.jobs), name)])])}, which the module does not have."
  }

  validation {
    condition     = alltrue([for key, job in var.jobs : job.schedule_expression == null || length(job.after) == 0])
    error_message = "A job runs on its schedule_expression or after other jobs, not both: ${join(", ", [for key, job in var.jobs : key if job.schedule_expression != null && length(job.after) > 0])} has both (a step runs for its pipeline's firing, which its scheduled root's schedule makes)."
  }

  validation {
    # A scheduled job runs on its own firings: run once more as another's on_failure it would
    # carry no job of its own in the pipeline's message.
    condition = alltrue(flatten([
      for key, job in var.jobs : [for name in job.on_failure : try(var.jobs[name].schedule_expression == null, true)]
    ]))
    error_message = "on_failure must name jobs without a schedule_expression: ${join("; ", [for key, job in var.jobs : "job ${key} names ${join(", ", [for name in job.on_failure : name if try(var.jobs[name].schedule_expression != null, false)])}" if anytrue([for name in job.on_failure : try(var.jobs[name].schedule_expression != null, false)])])}."
  }

  validation {
    condition = alltrue([
      for key, job in var.jobs : job.schedule_expression != null || length(job.after) > 0 || anytrue([for other in values(var.jobs) : contains(other.on_failure, key)])
    ])
    error_message = "Each job needs a schedule_expression, or after = [the jobs it follows], or to be named in another job's on_failure: ${join(", ", [for key, job in var.jobs : key if job.schedule_expression == null && length(job.after) == 0 && !anytrue([for other in values(var.jobs) : contains(other.on_failure, key)])])} has none of them."
  }

  validation {
    # A job without a schedule_expression has no schedule or rule for these to set.
    condition = alltrue([
      for key, job in var.jobs : job.schedule_expression != null || (job.enabled && job.description == null && job.schedule_expression_timezone == null && job.flexible_time_window == null && job.catch_up == null)
    ])
    error_message = "enabled, description, schedule_expression_timezone, flexible_time_window and catch_up belong to a schedule, and a pipeline's step has none (its root's schedule sets them for the whole pipeline): ${join(", ", [for key, job in var.jobs : key if job.schedule_expression == null && !(job.enabled && job.description == null && job.schedule_expression_timezone == null && job.flexible_time_window == null && job.catch_up == null)])} sets one."
  }

  validation {
    # The daemon refuses what a process environment cannot hold.
    condition = alltrue(flatten([
      for key, job in var.jobs : [for env in keys(job.envs) : can(regex("^[^=]+$", env))]
    ]))
    error_message = "envs names must be non-empty and must not contain '='."
  }

  # What the daemon refuses in any message, checked at plan: a job refused there fails at every
  # firing, and a pipeline's step (docs/pipelines.md) refused there refuses its root's message.
  validation {
    # A command line and a process environment are C strings, and a header ends at a line break.
    condition = alltrue([
      for key, job in var.jobs : length(regexall("\\x00", join("", concat(
        [for text in [job.command, job.event_id, job.lock_id, job.concurrency_key] : text if text != null],
        keys(job.envs), values(job.envs), try(keys(job.http.headers), []), try(values(job.http.headers), [])
      )))) == 0 && alltrue([for name, value in try(coalesce(job.http.headers, {}), {}) : name != "" && length(regexall("[\r\n]", "${name}${value}")) == 0])
    ])
    error_message = "command, envs, event_id, lock_id, concurrency_key and http.headers must not hold a NUL character, and a header's name or value a line break (nor its name be empty): ${join(", ", [for key, job in var.jobs : key if !(length(regexall("\\x00", join("", concat([for text in [job.command, job.event_id, job.lock_id, job.concurrency_key] : text if text != null], keys(job.envs), values(job.envs), try(keys(job.http.headers), []), try(values(job.http.headers), []))))) == 0 && alltrue([for name, value in try(coalesce(job.http.headers, {}), {}) : name != "" && length(regexall("[\r\n]", "${name}${value}")) == 0]))])} holds one."
  }

  validation {
    # The bytes of UTF-8 a base64 text holds: 3 per 4 characters, less its padding.
    condition = alltrue([
      for key, job in var.jobs : alltrue([
        for text in [job.event_id, job.lock_id, job.concurrency_key] : length(base64encode(text)) * 3 / 4 - length(regexall("=", base64encode(text))) <= 2048 if text != null
      ])
    ])
    error_message = "event_id, lock_id and concurrency_key become DynamoDB keys, of at most 2048 bytes: ${join(", ", [for key, job in var.jobs : key if !alltrue([for text in [job.event_id, job.lock_id, job.concurrency_key] : length(base64encode(text)) * 3 / 4 - length(regexall("=", base64encode(text))) <= 2048 if text != null])])} has a longer one."
  }

  validation {
    # Go's durations are int64 nanoseconds; a malformed one is the validations' below to name.
    condition = alltrue([
      for key, job in var.jobs : alltrue([
        for text in [job.life_time, job.timeout, job.retry_delay, try(job.http.timeout, null)] : try(sum([
          for part in regexall("([0-9]+(?:\\.[0-9]+)?)(ns|us|µs|μs|ms|s|m|h)", text) : tonumber(part[0]) * lookup({ ns = 1, us = 1000, "µs" = 1000, "μs" = 1000, ms = 1000000, s = 1000000000, m = 60000000000, h = 3600000000000 }, part[1])
        ]) <= 9223372036854775807, true) if text != null
      ])
    ])
    error_message = "life_time, timeout, retry_delay and http.timeout must be at most 2562047h47m16s (Go's longest duration): ${join(", ", [for key, job in var.jobs : key if !alltrue([for text in [job.life_time, job.timeout, job.retry_delay, try(job.http.timeout, null)] : try(sum([for part in regexall("([0-9]+(?:\\.[0-9]+)?)(ns|us|µs|μs|ms|s|m|h)", text) : tonumber(part[0]) * lookup({ ns = 1, us = 1000, "µs" = 1000, "μs" = 1000, ms = 1000000, s = 1000000000, m = 60000000000, h = 3600000000000 }, part[1])]) <= 9223372036854775807, true) if text != null])])} has a longer one."
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
      for key, job in var.jobs : job.concurrency_key != "" && (job.concurrency_limit == null || job.concurrency_key != null)
    ])
    error_message = "concurrency_key, when set, must not be empty, and concurrency_limit needs a concurrency_key."
  }

  validation {
    condition = alltrue([
      for key, job in var.jobs :
      job.concurrency_limit == null || try(job.concurrency_limit >= 1 && job.concurrency_limit <= 1000 && floor(job.concurrency_limit) == job.concurrency_limit, false)
    ])
    error_message = "concurrency_limit, when set, must be a whole number between 1 and 1000."
  }

  validation {
    condition = alltrue([
      for key, job in var.jobs :
      job.retries == null || try(job.retries >= 0 && job.retries <= 100 && floor(job.retries) == job.retries, false)
    ])
    error_message = "retries, when set, must be a whole number between 0 and 100."
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
      job.catch_up == null || can(regex("^([0-9]+(\\.[0-9]+)?(s|m|h|d))+$", job.catch_up))
    ])
    error_message = "catch_up must be a duration such as \"6h\", \"90m\" or \"2d\" (the daemon takes at most 7 days)."
  }

  validation {
    condition = alltrue([
      for key, job in var.jobs :
      job.timeout == null || can(regex("^([0-9]+(\\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$", job.timeout))
    ])
    error_message = "timeout must be a Go duration such as \"90s\", \"1h30m\" or \"1.5h\"."
  }

  validation {
    condition = alltrue([
      for key, job in var.jobs :
      job.retry_delay == null || can(regex("^([0-9]+(\\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$", job.retry_delay))
    ])
    error_message = "retry_delay must be a Go duration such as \"90s\", \"1h30m\" or \"1.5h\"."
  }

  validation {
    # Only the jobs with a call: the condition of a for expression guards the attributes it reads.
    condition = alltrue([
      for key, job in var.jobs :
      can(regex("^https?://([^/?#]*@)?[^/?#@:][^/?#@]*([/?#].*)?$", job.http.url)) if job.http != null
    ])
    error_message = "http.url must be an http:// or https:// URL with a host, such as \"http://127.0.0.1:8080/run\"."
  }

  validation {
    condition = alltrue([
      for key, job in var.jobs :
      contains(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"], upper(coalesce(job.http.method, "POST"))) if job.http != null
    ])
    error_message = "http.method, when set, must be GET, POST, PUT, PATCH, DELETE or HEAD."
  }

  validation {
    condition = alltrue([
      for key, job in var.jobs :
      job.http.timeout == null || can(regex("^([0-9]+(\\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$", job.http.timeout)) if job.http != null
    ])
    error_message = "http.timeout must be a Go duration such as \"90s\", \"1h30m\" or \"1.5h\"."
  }

  validation {
    condition = alltrue([
      for key, job in var.jobs :
      job.http.success_status == null || try(length(job.http.success_status) > 0 && alltrue([for status in job.http.success_status : status >= 100 && status <= 599 && floor(status) == status]), false) if job.http != null
    ])
    error_message = "http.success_status, when set, must be a non-empty list of status codes from 100 to 599."
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

variable "fifo" {
  description = "Make the queue and its DLQ FIFO queues (<name>.fifo, <name>-dlq.fifo, with content-based deduplication, which EventBridge Scheduler requires): each job's messages form a message group (its event_id), run one at a time and in order. SQS drops a message whose body equals one sent in the last 5 minutes: each schedule's body carries its firing's time, so only repeated deliveries of one firing are dropped, and a job may fire as often as it likes. The schedules' dead letters then go to a standard queue, <name>-scheduler-dlq, since EventBridge Scheduler refuses a FIFO one. Changing it replaces both queues. Use <name>.fifo as [sqs] queue_name."
  type        = bool
  default     = false
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
