variables {
  name     = "etcd2"
  data_dir = "/tmp/redlab-tftest/etcd2/data"
  log_file = "/tmp/redlab-tftest/etcd2/etcd.log"
  urls = {
    listen_client    = "http://127.0.0.1:7902"
    advertise_client = "http://127.0.0.1:7702"
    listen_peer      = "http://127.0.0.1:8002"
    advertise_peer   = "http://127.0.0.1:7802"
  }
  initial_cluster = {
    etcd1 = "http://127.0.0.1:7801"
    etcd2 = "http://127.0.0.1:7802"
    etcd3 = "http://127.0.0.1:7803"
  }
  cluster_token = "redlab-test"
}

run "renders" {
  command = plan
  assert {
    condition     = yamldecode(output.etcd_conf)["initial-cluster"] == "etcd1=http://127.0.0.1:7801,etcd2=http://127.0.0.1:7802,etcd3=http://127.0.0.1:7803"
    error_message = "initial-cluster must list every member, sorted by name."
  }
  assert {
    condition     = yamldecode(output.etcd_conf)["unsafe-no-fsync"] == false && yamldecode(output.etcd_conf)["data-dir"] == "/tmp/redlab-tftest/etcd2/data"
    error_message = "fsync must stay on, and data-dir be the one given."
  }
  assert {
    condition     = yamldecode(output.etcd_conf)["log-outputs"] == ["/tmp/redlab-tftest/etcd2/etcd.log"]
    error_message = "log-outputs must be the log file."
  }
}

run "even_cluster" {
  command = plan
  variables {
    initial_cluster = {
      etcd1 = "http://127.0.0.1:7801"
      etcd2 = "http://127.0.0.1:7802"
    }
  }
  expect_failures = [var.initial_cluster]
}

run "not_in_cluster" {
  command = plan
  variables {
    name = "etcd9"
  }
  expect_failures = [output.etcd_conf]
}

run "unsafe_no_fsync" {
  command = plan
  variables {
    unsafe_no_fsync = true
  }
  assert {
    condition     = yamldecode(output.etcd_conf)["unsafe-no-fsync"] == true
    error_message = "unsafe_no_fsync must render unsafe-no-fsync: true."
  }
}
