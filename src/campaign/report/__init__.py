"""The hand-over: one self-contained HTML report of the campaign's records and runs (campaign report)."""
