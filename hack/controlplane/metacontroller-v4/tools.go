//go:build tools

// Package tools pins the Metacontroller command we build into .bin/ when the
// module proxy serves v4. In v4 the module root is no longer a main package:
// the command lives in pkg/cmd/metacontroller.
package tools

import _ "metacontroller/pkg/cmd/metacontroller"
