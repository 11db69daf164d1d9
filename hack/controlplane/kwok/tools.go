//go:build tools

// Package tools pins the kwok command we build into .bin/.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
