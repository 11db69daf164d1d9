//go:build tools

// Package tools pins the kustomize command we build into .bin/.
package tools

import _ "sigs.k8s.io/kustomize/kustomize/v5"
