# The lock and dedupe table, in the Go daemon's schema so that both daemons can share it while
# a fleet migrates.

locals {
  provisioned = var.billing_mode == "PROVISIONED"
}

resource "aws_dynamodb_table" "locks" {
  name         = var.name
  billing_mode = var.billing_mode
  # DynamoDB refuses capacity settings on an on-demand table.
  read_capacity  = local.provisioned ? var.read_capacity : null
  write_capacity = local.provisioned ? var.write_capacity : null

  # Items are {Id: message id, Type: "throttle"} (dedupe) and {Id: lock_id, Type: "lock"} (locks).
  hash_key  = "Id"
  range_key = "Type"

  attribute {
    name = "Id"
    type = "S"
  }

  attribute {
    name = "Type"
    type = "S"
  }

  # Unix seconds after which a dedupe record is useless: the queue can no longer redeliver its
  # message. Declared only because the index below is keyed on it.
  attribute {
    name = "Expired"
    type = "N"
  }

  # DynamoDB deletes dedupe records once Expired has passed. Lock items carry no Expired, so TTL
  # never removes a held lock.
  ttl {
    attribute_name = "Expired"
    enabled        = true
  }

  # The Go daemon swept expired dedupe records hourly by querying this index; the Python daemon
  # leaves them to TTL and never reads it. The sweep deletes by Id and Type, which every
  # projection carries, so KEYS_ONLY (the default) keeps the index small and its writes cheap.
  global_secondary_index {
    name            = "TypeExpiredIndex"
    hash_key        = "Type"
    range_key       = "Expired"
    projection_type = var.index_projection_type
    read_capacity   = local.provisioned ? var.read_capacity : null
    write_capacity  = local.provisioned ? var.write_capacity : null
  }

  point_in_time_recovery {
    enabled = var.point_in_time_recovery
  }

  tags = var.tags
}
