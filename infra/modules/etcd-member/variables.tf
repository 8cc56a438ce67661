variable "name" {
  description = "The member's name in the cluster (etcd's --name); a key of initial_cluster."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,30}$", var.name))
    error_message = "name must be lower-case letters, digits and '-', starting with a letter, at most 31 characters."
  }
}

variable "data_dir" {
  description = "Absolute directory of the member's data (WAL and snapshots, the bbolt database)."
  type        = string
  validation {
    condition     = can(regex("^/[A-Za-z0-9._/-]+$", var.data_dir))
    error_message = "data_dir must be an absolute path of letters, digits, '.', '_', '-' and '/'."
  }
}

variable "log_file" {
  description = "Absolute file etcd writes its log to; empty: standard error (journald under systemd)."
  type        = string
  default     = ""
  validation {
    condition     = var.log_file == "" || can(regex("^/[A-Za-z0-9._/-]+$", var.log_file))
    error_message = "log_file must be empty or an absolute path of letters, digits, '.', '_', '-' and '/'."
  }
}

variable "urls" {
  description = "Where the member listens (listen_client, listen_peer) and what it tells clients and peers to use (advertise_client, advertise_peer). They differ when something sits in between, as the lab's fault fronts do."
  type = object({
    listen_client    = string
    advertise_client = string
    listen_peer      = string
    advertise_peer   = string
  })
  validation {
    condition     = alltrue([for u in values(var.urls) : can(regex("^http://[A-Za-z0-9.-]+:[0-9]+$", u))])
    error_message = "every URL must be http://HOST:PORT (no TLS in this module yet, no path)."
  }
}

variable "initial_cluster" {
  description = "Every member of the new cluster, name => advertised peer URL; it must hold this member with urls.advertise_peer."
  type        = map(string)
  validation {
    condition     = length(var.initial_cluster) % 2 == 1
    error_message = "initial_cluster must have an odd number of members, so that a majority exists."
  }
}

variable "cluster_token" {
  description = "The initial cluster token: distinct per cluster, so that members of two clusters never join each other."
  type        = string
  validation {
    condition     = can(regex("^[A-Za-z0-9._-]{1,64}$", var.cluster_token))
    error_message = "cluster_token must be 1-64 letters, digits, '.', '_' or '-'."
  }
}

variable "heartbeat_ms" {
  description = "Raft heartbeat interval in milliseconds (etcd's default 100)."
  type        = number
  default     = 100
  validation {
    condition     = var.heartbeat_ms >= 10 && var.heartbeat_ms <= 5000
    error_message = "heartbeat_ms must be 10-5000."
  }
}

variable "election_ms" {
  description = "Raft election timeout in milliseconds (etcd's default 1000); at least five heartbeats."
  type        = number
  default     = 1000
  validation {
    condition     = var.election_ms >= 50 && var.election_ms <= 50000
    error_message = "election_ms must be 50-50000."
  }
}

variable "unsafe_no_fsync" {
  description = "true renders etcd's unsafe-no-fsync: etcd never fsyncs its WAL or database, so a power cut of a majority loses writes it acknowledged. Only for a declared negative control (the lab's --etcd-unsafe-no-fsync); never in a deployment."
  type        = bool
  default     = false
}
