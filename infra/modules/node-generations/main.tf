# Holds each node's definition until that node's generation changes.
#
# A resource argument that forces replacement (EC2 user data with
# user_data_replace_on_change, an AMI, ...) replaces every node whose value
# changed, all in one apply, and `-replace` only adds to such a plan: a new
# password in the user data would take every Redlock node down at once. Fed
# through this module instead, a change of the inputs replaces nothing; each
# node picks up the current definition when its generation is raised, one
# node per apply.

resource "terraform_data" "pin" {
  for_each = var.definitions

  input            = each.value
  triggers_replace = lookup(var.generations, each.key, "0")

  lifecycle {
    # The definition a node was created with stays until triggers_replace
    # (the generation) replaces the pin, which then takes the current one.
    ignore_changes = [input]
  }
}
