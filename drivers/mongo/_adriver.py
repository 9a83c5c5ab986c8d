"""``AsyncMongoDriver``: the MongoDB driver on PyMongo's native ``AsyncMongoClient`` (asyncio, no threads)."""

from __future__ import annotations

import pymongo

from ._store_async import AsyncMongoStore
from ._unblocking import AsyncHub

if pymongo.version_tuple < (4, 13):  # the async API was a beta before 4.13
    raise ImportError(f"pymongo {pymongo.version} has no stable AsyncMongoClient (4.13 or later has)")

__all__ = ["AsyncMongoDriver"]


class AsyncMongoDriver(AsyncMongoStore):
    """The MongoDB driver's async flavour: every verb ``async def``, on PyMongo's ``AsyncMongoClient``.

    The same arguments, checks, coded refusals, queries and fencing as
    :class:`~jobcore.drivers.mongo.MongoDriver` (both are generated from one source); the
    client is an ``AsyncMongoClient`` (made from a URI with the same ``timeoutMS``,
    ``connectTimeoutMS`` and ``maxPoolSize`` defaults, or handed in and then not closed).
    The constructor does no I/O: the client connects on the first awaited call.

    Differences that come from not blocking the loop:

    - ``clock``: by default an :class:`~jobcore.drivers.mongo._unblocking.AsyncStoreClock`; its
      reading of the server's time is renewed by the driver's calls (awaited), and
      ``clock.now()`` carries the last one forward. Before any call it has no reading and
      raises ``JC_DB_FAILURE``: await ``driver.migrate()`` (or any verb) first.
    - ``capabilities``: ``notify`` and ``transactional_enqueue`` are known once the server
      answered ``hello`` (any call that reaches it, ``migrate`` included); before that only
      those every server offers are listed.
    - ``enqueue(..., session=s)``/``enqueue_many(..., session=s)`` take PyMongo's
      ``AsyncClientSession`` started from this driver's client (``connection_type``).
    - ``subscribe`` follows a change stream in a task on the running loop; callbacks run on
      that loop and must not block it.

    Args: as :class:`~jobcore.drivers.mongo.MongoDriver`, with an ``AsyncMongoClient``.
    """

    def _hub_idle(self, hub: AsyncHub) -> None:
        """The last subscription of ``hub`` closed: stop it (a later subscribe starts another).

        Runs on the loop (the hub sees to it), where ``subscribe`` checks and adds without
        awaiting in between, so nobody joins while this checks.
        """
        if self._hub is not hub or not hub.empty:
            return
        self._hub = None
        hub.close()
