"""Driver-private tests of the MongoDB driver (what the parity suite cannot see)."""
