"""The PostgreSQL driver's private tests (schema, transactions, notify, faults, SQL shape)."""
