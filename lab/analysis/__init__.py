"""What the figures mean: statistics, comparisons between runs, SLOs, the capacity search."""
