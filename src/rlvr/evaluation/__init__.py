"""Held-out evaluation at fixed decoding (`rlvr eval`, and the trainer's evaluations): pass@k,
maj@k, tool use, budget metrics."""
