# Control-plane binaries for the local stack and the e2e tests, kwok included,
# built from the Go module proxy by the wrapper modules in hack/controlplane/<component>/.
# build.sh rebuilds a component only when its pinned versions (go.mod/go.sum),
# build.sh itself or the Go version change, or a binary is missing.
# Metacontroller: v4 (metacontroller-v4/) when the module proxy serves it, else
# v1.5.20 (metacontroller/); NODEWARDEN_METACONTROLLER=v4|v1 forces one, and
# .bin/metacontroller.version says which was built and why.
CONTROLPLANE_COMPONENTS := kubernetes etcd kustomize kwok metacontroller
CONTROLPLANE_BIN := .bin

.PHONY: controlplane-bins controlplane-clean controlplane-tidy

controlplane-bins:
	@command -v go >/dev/null || { echo "controlplane: Go is required (go.dev/dl); none on PATH" >&2; exit 1; }
	@for c in $(CONTROLPLANE_COMPONENTS); do \
	  bash hack/controlplane/build.sh $$c $(CONTROLPLANE_BIN) || exit 1; \
	done

controlplane-clean:
	rm -rf $(CONTROLPLANE_BIN)

# After editing a pinned version in a wrapper go.mod: refresh its go.sum.
# metacontroller-v4 is tidied only when the module proxy serves it today.
CONTROLPLANE_TIDY = GOTOOLCHAIN=local GOSUMDB=off GONOSUMDB='*' GOFLAGS=-mod=mod go mod tidy
controlplane-tidy:
	@for c in $(CONTROLPLANE_COMPONENTS); do \
	  (cd hack/controlplane/$$c && $(CONTROLPLANE_TIDY)) || exit 1; \
	done
	@(cd hack/controlplane/metacontroller-v4 && $(CONTROLPLANE_TIDY)) \
	  || echo "controlplane: metacontroller-v4 left as it is: it cannot be resolved today (see above)"
