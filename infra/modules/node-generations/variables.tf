variable "definitions" {
  description = "What each node is built from, by node key (\"0\", \"1\", ...): every value whose change replaces the node, such as its user data, image and instance type. A change here reaches no node by itself."
  type        = map(map(string))
  validation {
    condition     = alltrue([for k in keys(var.definitions) : can(regex("^[A-Za-z0-9_-]+$", k))])
    error_message = "definitions keys must be node keys: letters, digits, '_' and '-'."
  }
}

variable "generations" {
  description = "Generation of each node, by node key; a node without an entry is at generation \"0\". Changing one node's generation hands that node, and only that node, its current definition (which replaces it)."
  type        = map(string)
  default     = {}
  validation {
    condition     = alltrue([for g in values(var.generations) : can(regex("^[A-Za-z0-9._:/-]+$", g))])
    error_message = "generations must be short tokens (letters, digits, '.', '_', ':', '/', '-'), such as 1, 2, ..."
  }
}
