"""The Kubernetes API: fresh reads and the writes a hook's response cannot make (pods, other objects,
Events), each preconditioned on the uid or resourceVersion it was decided on."""
