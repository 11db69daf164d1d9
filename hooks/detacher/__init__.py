"""node-detacher's pure pieces: names, triggers, targets, ordered pod shutdown."""
