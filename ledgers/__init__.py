"""Per-search ledgers (PRODUCT.md §5): schema, atomic persistence, review and compare."""
