terraform {
  # optional() attributes with defaults, used by var.jobs, arrived in Terraform 1.3.
  required_version = ">= 1.3"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # 5.27 added `state` to aws_cloudwatch_event_rule and deprecated `is_enabled`, which this
      # module therefore never uses. The upper bound keeps the next major's removals out until
      # someone has planned against it.
      version = ">= 5.27, < 7.0"
    }
  }
}
