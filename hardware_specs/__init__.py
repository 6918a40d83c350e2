"""Bundled GPU spec files, one YAML file per GPU; read them through rooflinesim.hardware."""
