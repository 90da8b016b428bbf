"""hmmsearch's and hmmscan's outputs: the text report, the tables, the hit records and the progress line."""
