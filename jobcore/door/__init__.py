"""The front door: the checked public verbs every driver shares, over each driver's narrow backends."""

from ._leases import LeasesBackend, LeasesDoor
from ._schedules import SchedulesBackend, SchedulesDoor

__all__ = [
    "LeasesBackend",
    "LeasesDoor",
    "SchedulesBackend",
    "SchedulesDoor",
]
