"""The Olist-shaped world: a seeded generator with Olist's schema and mess, and its oracles."""
