"""Helpers every backend may use: capped reads, folders' owners, once-maps, signed hashes,
logical caches, declared keys, DSN redaction, the view-probe planner, fault points."""
