"""nodewarden: stateless Metacontroller hooks for the node lifecycle on AWS."""
