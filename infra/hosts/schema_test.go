package hosts_test

import "github.com/hashicorp/hcl/v2"

var outputsSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "output", LabelNames: []string{"name"}}}}
