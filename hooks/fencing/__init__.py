"""Fencing's pure pieces: names, policies, the node timeline, the storm guard,
fast-failover pod selection and the FencingRequest state machine."""
