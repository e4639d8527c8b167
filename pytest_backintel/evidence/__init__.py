"""Evidence: re-execute what an analyst cites (SQL on a fresh read-only connection, Python in
the sandbox), on the item's store and on perturbed probes; SQL dialects and translation.
Uses the core modules, `stores` and `sandbox`; no other stage."""
