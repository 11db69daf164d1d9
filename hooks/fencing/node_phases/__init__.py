"""node-fencing's timeline of one node, one module each, in the order a call reads and writes them.

  situation    where the node stands (``Situation``): its governing policy,
               its health, the gate on new fencing and failover, and the
               FencingRequest that proves fencing in flight
  release      healthy, or no policy: our conditions and taints come off, the
               FencingRequest goes once it is done
  fence        unhealthy: triaged, required, complete; fast failover's force
               deletes
  marks        our taints and the error annotation on the Node
  attachments  the node's FencingRequest and its UnhealthyNode record

hooks/fencing/node.py runs them (decide); everything here is pure.
"""
