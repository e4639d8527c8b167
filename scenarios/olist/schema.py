"""The Olist tables' columns and Parquet types, as in the public Olist CSVs.

Timestamps are 'YYYY-MM-DD HH:MM:SS' strings (as in the CSVs), zip-code prefixes are
five-character strings, and the misspelt `..._lenght` column names are Olist's own.
"""

from __future__ import annotations

import polars as pl

__all__ = ["SCHEMAS", "SHARED_REVIEW_COLUMNS"]

SHARED_REVIEW_COLUMNS = (
    "review_id",
    "review_score",
    "review_comment_title",
    "review_comment_message",
    "review_creation_date",
    "review_answer_timestamp",
)
_S = pl.String
_I = pl.Int64
_F = pl.Float64
SCHEMAS: dict[str, dict[str, type[pl.DataType]]] = {
    "orders": {
        "order_id": _S,
        "customer_id": _S,
        "order_status": _S,
        "order_purchase_timestamp": _S,
        "order_approved_at": _S,
        "order_delivered_carrier_date": _S,
        "order_delivered_customer_date": _S,
        "order_estimated_delivery_date": _S,
    },
    "order_items": {
        "order_id": _S,
        "order_item_id": _I,
        "product_id": _S,
        "seller_id": _S,
        "shipping_limit_date": _S,
        "price": _F,
        "freight_value": _F,
    },
    "customers": {
        "customer_id": _S,
        "customer_unique_id": _S,
        "customer_zip_code_prefix": _S,
        "customer_city": _S,
        "customer_state": _S,
    },
    "order_payments": {
        "order_id": _S,
        "payment_sequential": _I,
        "payment_type": _S,
        "payment_installments": _I,
        "payment_value": _F,
    },
    "order_reviews": {
        "review_id": _S,
        "order_id": _S,
        "review_score": _I,
        "review_comment_title": _S,
        "review_comment_message": _S,
        "review_creation_date": _S,
        "review_answer_timestamp": _S,
    },
    "products": {
        "product_id": _S,
        "product_category_name": _S,
        "product_name_lenght": _I,
        "product_description_lenght": _I,
        "product_photos_qty": _I,
        "product_weight_g": _I,
        "product_length_cm": _I,
        "product_height_cm": _I,
        "product_width_cm": _I,
    },
    "sellers": {
        "seller_id": _S,
        "seller_zip_code_prefix": _S,
        "seller_city": _S,
        "seller_state": _S,
    },
    "product_category_name_translation": {
        "product_category_name": _S,
        "product_category_name_english": _S,
    },
}
