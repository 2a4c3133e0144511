# Pipelines (docs/pipelines.md): the jobs that run `after` others or as their `on_failure`,
# grouped by the scheduled job they start from, whose message carries the whole pipeline.

locals {
  # The jobs that lead to each job: those it runs after, and those naming it in on_failure. An
  # unknown name is left out here: var.jobs's validation refuses it.
  pipeline_sources = {
    for key, job in var.jobs : key => distinct(concat(
      [for name in job.after : name if contains(keys(var.jobs), name)],
      [for other, that in var.jobs : other if contains(that.on_failure, key)],
    ))
  }

  # Every job that leads to each job. Terraform has no recursion: each round doubles the length
  # of the paths followed, up to 64 edges. A pipeline has at most 50 steps (MAX_STEPS in
  # sqsjkr/contract/pipeline.py), so a longer path belongs to a pipeline refused for its size.
  pipeline_reach_2  = { for key, near in local.pipeline_sources : key => distinct(concat(near, flatten([for name in near : local.pipeline_sources[name]]))) }
  pipeline_reach_4  = { for key, near in local.pipeline_reach_2 : key => distinct(concat(near, flatten([for name in near : local.pipeline_reach_2[name]]))) }
  pipeline_reach_8  = { for key, near in local.pipeline_reach_4 : key => distinct(concat(near, flatten([for name in near : local.pipeline_reach_4[name]]))) }
  pipeline_reach_16 = { for key, near in local.pipeline_reach_8 : key => distinct(concat(near, flatten([for name in near : local.pipeline_reach_8[name]]))) }
  pipeline_reach_32 = { for key, near in local.pipeline_reach_16 : key => distinct(concat(near, flatten([for name in near : local.pipeline_reach_16[name]]))) }
  pipeline_upstream = { for key, near in local.pipeline_reach_32 : key => distinct(concat(near, flatten([for name in near : local.pipeline_reach_32[name]]))) }

  # A job that leads back to itself: its pipeline would never end, or never start.
  pipeline_cycles = sort([for key, upstream in local.pipeline_upstream : key if contains(upstream, key)])

  # The scheduled jobs that lead to each job: the roots of its pipelines. A step (a job with
  # after) has one; a job run only as an on_failure may serve several pipelines, each carrying it.
  pipeline_roots_of = {
    for key, upstream in local.pipeline_upstream : key => sort([for name in upstream : name if var.jobs[name].schedule_expression != null])
  }

  # Each pipeline, by its root's key: the root and every job it leads to.
  pipeline_steps = {
    for root in distinct(flatten([for key, roots in local.pipeline_roots_of : roots])) : root => sort(distinct(concat([root], [
      for key, roots in local.pipeline_roots_of : key if contains(roots, root)
    ])))
  }

  # What a root's message adds, in the shape sqsjkr/contract/pipeline.py parses: the pipeline,
  # named after its root, each step with its after, its on_failure and, but for the root (whose
  # job is the message itself), the fields of its own message; and the step the message runs.
  pipeline_fields = {
    for root, steps in local.pipeline_steps : root => {
      step = root
      pipeline = {
        name = root
        root = root
        steps = {
          for step in steps : step => {
            for field, value in {
              after      = var.jobs[step].after
              on_failure = var.jobs[step].on_failure
              job        = step == root ? null : local.job_messages[step]
            } : field => value if value != null
          }
        }
      }
    }
  }
}

# The checks that need the whole graph, made at plan. An output, since every plan evaluates it
# and it names no resource; the single-job checks are var.jobs's validations.
output "pipelines" {
  description = "The module's pipelines, by the key of their scheduled root: the keys of each one's jobs (docs/pipelines.md)."
  value       = local.pipeline_steps

  precondition {
    condition     = length(local.pipeline_cycles) == 0
    error_message = "after and on_failure must not lead a job back to itself: ${join(", ", local.pipeline_cycles)} are in a cycle."
  }

  precondition {
    condition     = alltrue([for key, roots in local.pipeline_roots_of : length(roots) <= 1 || length(var.jobs[key].after) == 0])
    error_message = "A pipeline has one scheduled root: ${join("; ", [for key, roots in local.pipeline_roots_of : "job ${key} runs after jobs of ${join(" and ", roots)}" if length(roots) > 1 && length(var.jobs[key].after) > 0])}. Make one run after the other, or give each its own steps."
  }

  precondition {
    condition     = alltrue([for key, roots in local.pipeline_roots_of : length(roots) > 0 || var.jobs[key].schedule_expression != null || contains(local.pipeline_cycles, key)])
    error_message = "A job without a schedule_expression runs in a pipeline, which a scheduled job starts: no scheduled job leads to ${join(", ", [for key, roots in local.pipeline_roots_of : key if length(roots) == 0 && var.jobs[key].schedule_expression == null && !contains(local.pipeline_cycles, key)])} by after or on_failure."
  }

  precondition {
    # The whole graph travels in every step's message, and the daemon refuses a longer one.
    condition     = alltrue([for root, steps in local.pipeline_steps : length(steps) <= 50])
    error_message = "A pipeline has at most 50 jobs: ${join("; ", [for root, steps in local.pipeline_steps : "the pipeline of ${root} has ${length(steps)}" if length(steps) > 50])}."
  }
}
