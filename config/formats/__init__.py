"""Date formats of every page (FORMAT_MODULE_PATH): admin lists, detail pages and the tenant UI read alike."""
