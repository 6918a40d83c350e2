"""Each engine's scheduler, a module each, around the state they share (``base``)."""
