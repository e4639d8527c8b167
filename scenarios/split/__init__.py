"""`olist-split`: the Olist world split over two stores (`olist_orders`, `olist_catalog`), and its
oracles."""
