"""`olist-boundaries`: the Olist world with what a real warehouse holds beside the tables an
analyst needs, and its oracles."""
