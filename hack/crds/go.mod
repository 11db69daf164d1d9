// The releases whose CRDs the local stack serves as their projects publish
// them: Cluster API Provider AWS (AWSCluster, AWSManagedControlPlane: what
// cluster-gc acts on), Karpenter (NodeClaim, NodePool) and Cluster API
// (Machine, MachineSet, MachineDeployment): the owners fencing asks to replace
// a node. Only the modules' files are used; nothing is built. module-dir.sh
// prints where a module is in the Go module cache, downloading it if needed;
// devcluster/manifests.py names the files it reads there.
module nodewarden.local/hack/crds

go 1.22

require (
	sigs.k8s.io/cluster-api v1.14.2
	sigs.k8s.io/cluster-api-provider-aws/v2 v2.13.0
	// v1.15.0 needs Go 1.26.9.
	sigs.k8s.io/karpenter v1.14.0
)
