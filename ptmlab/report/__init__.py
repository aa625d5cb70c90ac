"""HTML reports with embedded plots, and comparison of runs."""
