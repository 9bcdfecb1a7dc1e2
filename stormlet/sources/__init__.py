"""Offset-tracking spouts and the partitioned logs they read."""
