"""The demo: orders flowing into running totals per customer (accumulate) and latest order rows (replace)."""
