"""Cache invalidation between replicas: Redis publish/subscribe (`GRAPHGATE_REDIS_URL`).

Each replica caches authenticated keys and model lookups (server/services/tenants.py and
models.py). A write drops this process's entries itself; with a bus, it also publishes what
changed, and every replica subscribed drops the same entries when the message arrives
(typically well under a millisecond on one network). Pub/sub delivers to connected subscribers
only, so a replica whose subscription breaks drops ALL its cached entries when it has
resubscribed: a message it missed can cost a cache miss, never a stale answer past that point.
Without Redis, `LocalBus` delivers to this process only and the caches' TTLs bound staleness.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Final, Protocol

import redis

log = logging.getLogger("graphgate.invalidation")
CHANNEL: Final = "graphgate:invalidate"
# What a message says changed: {"kind": "keys"} (any key or tenant), {"kind": "model",
# "tenant": ..., "name": ...}, {"kind": "policy", "tenant": ...} (its policy, quota or suspension)
# or {"kind": "all"} (this process resubscribed: forget everything).
Event = dict[str, str]
Handler = Callable[[Event], None]


class Bus(Protocol):
    def publish(self, event: Event) -> None: ...

    def subscribe(self, handler: Handler) -> None: ...

    def close(self) -> None: ...


class LocalBus:
    """This process only: the writer has already dropped its own entries, nothing to send."""

    def publish(self, event: Event) -> None:
        pass

    def subscribe(self, handler: Handler) -> None:
        pass

    def close(self) -> None:
        pass


class RedisBus:
    """Publishes to one Redis channel; a daemon thread hands every message to the handlers."""

    def __init__(self, client: redis.Redis, *, retry_s: float = 0.5) -> None:
        self._redis = client
        self._retry_s = retry_s
        self._handlers: list[Handler] = []
        self._stopping = threading.Event()
        self._subscribed = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="gg-invalidate", daemon=True)
        self._thread.start()

    def publish(self, event: Event) -> None:
        try:
            self._redis.publish(CHANNEL, json.dumps(event))
        except redis.RedisError as error:
            # The write is committed; other replicas see it when their entries expire.
            log.warning("redis: could not publish %s: %s", event, error)

    def subscribe(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def wait_subscribed(self, timeout_s: float) -> bool:
        return self._subscribed.wait(timeout_s)

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=2)

    def _listen(self) -> None:
        while not self._stopping.is_set():
            try:
                self._listen_once()
            except (redis.RedisError, OSError) as error:
                self._subscribed.clear()
                log.warning("redis: invalidation subscription lost, retrying: %s", error)
                time.sleep(self._retry_s)

    def _listen_once(self) -> None:
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call, unused-ignore]
        try:
            pubsub.subscribe(CHANNEL)
            self._deliver({"kind": "all"})  # anything missed while unsubscribed is dropped
            self._subscribed.set()
            while not self._stopping.is_set():
                message = pubsub.get_message(timeout=0.2)
                if message is not None and message["type"] == "message":
                    self._deliver(_parse(message["data"]))
        finally:
            pubsub.close()

    def _deliver(self, event: Event | None) -> None:
        if event is None:
            return
        for handler in self._handlers:
            try:
                handler(event)
            except Exception:  # one bad handler must not stop invalidation for the others
                log.exception("invalidation handler failed on %s", event)


def _parse(data: object) -> Event | None:
    try:
        raw = json.loads(data if isinstance(data, (str, bytes)) else b"")
    except ValueError:
        return None
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        return None
    return {str(k): v for k, v in raw.items()}
