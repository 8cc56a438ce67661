run "bad_node_key" {
  command = plan
  variables {
    definitions = { "node 0" = { user_data = "x" } }
  }
  expect_failures = [var.definitions]
}

run "bad_generation" {
  command = plan
  variables {
    definitions = { "0" = { user_data = "x" } }
    generations = { "0" = "two words" }
  }
  expect_failures = [var.generations]
}
