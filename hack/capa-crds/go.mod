// The Cluster API Provider AWS release whose CRDs (AWSCluster,
// AWSManagedControlPlane) cluster-gc is tested against. Only the module's
// files are used (config/crd/bases); nothing is built. crd-dir.sh prints
// where they are in the Go module cache, downloading them if needed.
module nodewarden.local/hack/capa-crds

go 1.22

require sigs.k8s.io/cluster-api-provider-aws/v2 v2.13.0
