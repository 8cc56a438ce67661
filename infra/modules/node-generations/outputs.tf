output "definitions" {
  description = "The definition each node was last handed: the inputs as they were when its generation last changed or it first appeared. Sensitive, as a user data may be."
  value       = { for k, p in terraform_data.pin : k => p.output }
  sensitive   = true
}

output "pin_ids" {
  description = "An id per node that changes exactly when the node is handed a new definition (and so is replaced)."
  value       = { for k, p in terraform_data.pin : k => p.id }
}

output "pending" {
  description = "Nodes whose definition differs from the current inputs: they wait for a generation change."
  value       = sort([for k, p in terraform_data.pin : k if nonsensitive(sha256(jsonencode(p.output))) != nonsensitive(sha256(jsonencode(var.definitions[k])))])
}
