# A change of every node's definition replaces no node; raising one node's
# generation replaces that node alone. Applied for real (terraform_data is
# built in), run after run on one state, as successive applies would.

variables {
  definitions = {
    "0" = { user_data = "password v1", ami = "ami-1" }
    "1" = { user_data = "password v1", ami = "ami-1" }
    "2" = { user_data = "password v1", ami = "ami-1" }
  }
}

run "created" {
  assert {
    condition     = alltrue([for k, d in output.definitions : d.user_data == "password v1"])
    error_message = "A new node must get the current definition."
  }
  assert {
    condition     = length(output.pending) == 0
    error_message = "Nothing is pending right after creation."
  }
}

run "changed_everywhere_replaces_nothing" {
  variables {
    definitions = {
      "0" = { user_data = "password v2", ami = "ami-2" }
      "1" = { user_data = "password v2", ami = "ami-2" }
      "2" = { user_data = "password v2", ami = "ami-2" }
    }
  }

  assert {
    condition     = output.pin_ids == run.created.pin_ids
    error_message = "A definition change alone must replace no node."
  }
  assert {
    condition     = alltrue([for k, d in output.definitions : d.user_data == "password v1" && d.ami == "ami-1"])
    error_message = "Every node must keep the definition it has until its generation changes."
  }
  assert {
    condition     = join(",", output.pending) == "0,1,2"
    error_message = "Every node must be reported as pending."
  }
}

run "one_generation_replaces_one_node" {
  variables {
    definitions = {
      "0" = { user_data = "password v2", ami = "ami-2" }
      "1" = { user_data = "password v2", ami = "ami-2" }
      "2" = { user_data = "password v2", ami = "ami-2" }
    }
    generations = { "1" = "1" }
  }

  assert {
    condition     = output.pin_ids["1"] != run.created.pin_ids["1"]
    error_message = "Raising node 1's generation must replace node 1."
  }
  assert {
    condition     = output.pin_ids["0"] == run.created.pin_ids["0"] && output.pin_ids["2"] == run.created.pin_ids["2"]
    error_message = "Raising node 1's generation must replace no other node."
  }
  assert {
    condition     = output.definitions["1"].user_data == "password v2" && output.definitions["1"].ami == "ami-2"
    error_message = "The replaced node must get the current definition."
  }
  assert {
    condition     = output.definitions["0"].user_data == "password v1" && output.definitions["2"].user_data == "password v1"
    error_message = "The other nodes must keep theirs."
  }
  assert {
    condition     = join(",", output.pending) == "0,2"
    error_message = "The nodes not yet rolled must still be pending."
  }
}

run "same_generation_again_replaces_nothing" {
  variables {
    definitions = {
      "0" = { user_data = "password v3", ami = "ami-2" }
      "1" = { user_data = "password v3", ami = "ami-2" }
      "2" = { user_data = "password v3", ami = "ami-2" }
    }
    generations = { "1" = "1" }
  }

  assert {
    condition     = output.pin_ids == run.one_generation_replaces_one_node.pin_ids
    error_message = "A generation that did not change must replace nothing, whatever the definitions."
  }
}

run "new_node_gets_the_current_definition" {
  variables {
    definitions = {
      "0" = { user_data = "password v3", ami = "ami-2" }
      "1" = { user_data = "password v3", ami = "ami-2" }
      "2" = { user_data = "password v3", ami = "ami-2" }
      "3" = { user_data = "password v3", ami = "ami-2" }
    }
    generations = { "1" = "1" }
  }

  assert {
    condition     = output.definitions["3"].user_data == "password v3"
    error_message = "A node that appears gets the current definition."
  }
  assert {
    condition     = alltrue([for k in ["0", "1", "2"] : output.pin_ids[k] == run.one_generation_replaces_one_node.pin_ids[k]])
    error_message = "Adding a node must replace no existing node."
  }
}
