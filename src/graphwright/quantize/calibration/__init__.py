"""Calibration shared by every format: data, streaming statistics, range methods."""
