"""Metrics as plain data: histograms and rolling windows (used by the runtime to build its
snapshot), user metrics, the topology's structure, and the views the UI and the REST API show
(per component, per topology, per edge and per worker) over snapshots from any number of
workers."""
