"""Page helpers: presentation only (tables, figures, forms, text)."""
