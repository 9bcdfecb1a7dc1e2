"""The execution engine shared by local mode and workers: executors, routing, acking."""
