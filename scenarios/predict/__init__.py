"""`olist-predict`: prediction cohorts on the Olist world (level 8), their tasks and references."""
