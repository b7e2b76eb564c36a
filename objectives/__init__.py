"""The 24 objectives (PRODUCT.md §4) with their direction and metric, and the SLO
grammar of PRODUCT.md §2 (parse, print, check against a metrics record)."""
