"""jobcore's front door: the public verbs, checked once, over each driver's narrow backends."""

from jobcore.door._introspect import IntrospectBackend, IntrospectDoor, Refused, Spacing

__all__ = ["IntrospectBackend", "IntrospectDoor", "Refused", "Spacing"]
