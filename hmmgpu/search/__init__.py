"""A search run: the routing plan (where each part runs), the threaded engine, and hmmscan."""
