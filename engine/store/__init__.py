"""The durable store (see base.py). ``open_store(url)`` picks the backend by URL scheme."""
