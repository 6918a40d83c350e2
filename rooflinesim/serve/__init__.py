"""Serving under load: workloads, engine schedulers, step times, metrics (`rooflinesim serve`)."""
