"""The backends: ``memory`` (always available), ``postgres`` and ``mongo`` (extras)."""
