"""Batch jobs over what streaming left behind, on Apache Spark: replaying failed messages and
backfilling a topology's results over historical data. Needs ``pip install 'stormlet[spark]'``."""
