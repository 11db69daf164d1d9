"""fencing-request's phases, one module each, in the order a FencingRequest lives them.

  state       the working state of one call (``Step``): a copy of the status,
              the actions, Events and resyncs the phases add; fail, succeed,
              and the bounded wait for what cannot be read yet
  authority   honoured only in the controller's namespace; a control-plane
              node only with spec.allowControlPlane
  locate      the Node the request names, its uid and its instance
  ownership   the instance carries this cluster's tag
  queue       one node, one fence: wait behind an older live request for it
  power       StopInstances until DescribeInstances confirms the power-off;
              StartInstances for a Reboot
  recovery    the out-of-service taint and the force deletes it stands for,
              or ResourceDeletion's; every destructive step re-confirmed
  replacement once recovered, the node's proven owner is asked to replace it
              (spec.replacement), within the guards; the Auto Scaling
              Standby around a Reboot
  aftercare   the out-of-service taint comes off once the node is back
  deletion    a request deleted half-way takes its taint off (the finalize hook)
  invalid     an unreadable spec is reported once, nothing done

hooks/controllers/fencing_request.py runs them (decide) and holds the
pipeline interface; everything here is pure.
"""
