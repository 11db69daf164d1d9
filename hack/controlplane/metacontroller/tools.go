//go:build tools

// Package tools pins the Metacontroller command we build into .bin/.
// Metacontroller's go.mod says `module metacontroller`, so it cannot be
// `go install`ed; the replace line in go.mod fetches it from the module proxy.
package tools

import _ "metacontroller"
