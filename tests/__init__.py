"""jobcore's own tests: the driver-private and runtime tests beside the parity suite."""
