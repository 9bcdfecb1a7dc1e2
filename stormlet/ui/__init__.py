"""The web UI (``stormlet ui``, ``stormlet local --ui``): pages, a REST API under ``/api/v1/``
with Storm's resource names, and Prometheus metrics at ``/metrics``, over a local cluster or a
cluster's nimbus (see source.py); and the live progress line of ``stormlet local``."""
