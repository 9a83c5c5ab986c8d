"""MongoDB driver (in progress)."""
