"""The distributed runtime: nimbus, supervisors and workers over ZooKeeper and ZeroMQ."""
