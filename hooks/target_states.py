"""What a load balancer says of an instance it may send traffic to: the state names the detacher's rules
read and hooks.aws.elb answers with."""

# States in which a target no longer gets new traffic and has finished draining.
GONE_STATES = ("unused",)
# A classic ELB's instance as DescribeLoadBalancers lists it: registered, so it gets traffic (once healthy).
REGISTERED = "registered"
# States of a target that is registered: it gets traffic, or will once its health checks pass. A target that
# was deregistered is 'draining', then 'unused'; one read in these was registered again since.
IN_SERVICE_STATES = ("initial", "healthy", "unhealthy", "unavailable", REGISTERED)
# A target of a group with no reading at hand taken since the caller's detach began: it waits as for a draining one.
UNREAD = "unread"
