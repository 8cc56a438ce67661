// Package prose writes values the way people write them in a sentence or a
// table cell, not in Go's form: a list is "1, 2, 3", never "[1 2 3]".
package prose

import (
	"fmt"
	"strings"
)

// List is the elements of xs, each in fmt's default form, joined by ", ".
// An empty list is empty; callers that must say "none" say it themselves.
func List[T any](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}
