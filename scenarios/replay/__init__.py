"""`olist-replay`: the Olist world as it was known at the cutoffs of three standing reviews, and
its oracles."""
