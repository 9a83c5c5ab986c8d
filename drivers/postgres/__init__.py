"""PostgreSQL driver (in progress)."""
