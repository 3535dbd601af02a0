"""The names a store goes by in spans and metrics: which store (`durability.store`) and which
queue (OpenTelemetry's messaging `destination`), read from a `Durable`'s scheduler."""

from __future__ import annotations

from dataclasses import dataclass

from durability.interfaces import Durable

__all__ = ["Names"]

#: A scheduler's class, as the store it belongs to.
_STORES = {
    "MemoryScheduler": "memory",
    "RedisStreamScheduler": "redis-stream",
    "RedisSetScheduler": "redis-set",
    "PostgresScheduler": "postgres",
    "SqliteScheduler": "sqlite",
}


@dataclass(frozen=True, slots=True)
class Names:
    store: str
    destination: str

    @classmethod
    def of(cls, durable: Durable | None) -> Names:
        if durable is None:
            return cls("unknown", "default")
        scheduler = durable.scheduler
        kind = type(scheduler).__name__
        queue = getattr(scheduler, "queue", None) or getattr(scheduler, "namespace", None)
        return cls(_STORES.get(kind, kind), str(queue or "default"))

    def messaging(self, operation: str) -> dict[str, str]:
        """The messaging attributes of OpenTelemetry's semantic conventions, for `operation`
        ("send" for an arrive, "process" for a pass)."""
        return {
            "messaging.system": "durability",
            "messaging.operation.type": operation,
            "messaging.operation.name": "arrive" if operation == "send" else "pass",
            "messaging.destination.name": self.destination,
            "durability.store": self.store,
        }
