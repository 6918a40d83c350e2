"""Calibration profiles (data), fitting them to measurements, and validating predictions."""
