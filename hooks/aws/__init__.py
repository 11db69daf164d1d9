"""AWS through boto3: idempotent calls and look-ups; the rules that choose them live in the rule packages."""
