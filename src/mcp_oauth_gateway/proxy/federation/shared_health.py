"""A federated route rule's targets' health merged across the replicas sharing its Redis: a hash
per target (`…:health:<target>`) holding when it was last seen up, down and answering, its last
failure (with when), and its failures counted by reason. Each replica adds what it saw (`health`
sends it in batches); a later time never gives way to an earlier one, counts add up. Kept for
HEALTH_TTL after the last write. Redis not answering: `/status` shows what this replica saw."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .health import Seen
from .shared_keys import FAILURES, RedisHeld, log

# How long a target's merged health outlives the last replica's report of it.
HEALTH_TTL = 7 * 24 * 3600

# ARGV: the TTL, then field and value pairs: `f:<reason>` counts are added, the others are
# "<time> <text>" and taken only when their time is later than the stored one's.
_ADD = """
for i = 2, #ARGV, 2 do
  local field, value = ARGV[i], ARGV[i + 1]
  if string.sub(field, 1, 2) == 'f:' then
    redis.call('HINCRBY', KEYS[1], field, value)
  else
    local old = redis.call('HGET', KEYS[1], field)
    local at = tonumber(string.match(value, '^%S+'))
    if not old or at > tonumber(string.match(old, '^%S+')) then
      redis.call('HSET', KEYS[1], field, value)
    end
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""


def _fields(seen: Seen) -> list[str]:
    fields: list[str] = []
    for name, at in (("ok", seen.ok_at), ("up", seen.up_at), ("down", seen.down_at)):
        if at is not None:
            fields += [name, repr(at)]
    if seen.error is not None:
        fields += ["error", f"{seen.error[0]!r} {seen.error[1]}"]
    for reason, count in seen.failures.items():
        fields += [f"f:{reason}", str(count)]
    return fields


def _time(value: bytes | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value.split(b" ", 1)[0])
    except ValueError:
        return None


def seen_from(stored: Mapping[bytes, bytes]) -> Seen:
    """What the replicas saw of a target, read back."""
    error = stored.get(b"error")
    error_at = _time(error)
    failures: dict[str, int] = {}
    for name, count in stored.items():
        if name.startswith(b"f:"):
            try:
                failures[name[2:].decode()] = int(count)
            except ValueError:
                continue
    return Seen(
        ok_at=_time(stored.get(b"ok")),
        up_at=_time(stored.get(b"up")),
        down_at=_time(stored.get(b"down")),
        error=(error_at, error.split(b" ", 1)[1].decode("utf-8", "replace"))
        if error is not None and error_at is not None and b" " in error
        else None,
        failures=failures,
    )


class SharedHealth(RedisHeld):
    """`health.HealthStore` in Redis."""

    def _health_key(self, target: str) -> str:
        return f"{self.namespace}health:{target}"

    async def add_health(self, seen: Mapping[str, Seen]) -> None:
        """Add what this replica saw of each target since its last report."""
        try:
            for target, delta in seen.items():
                fields = _fields(delta)
                if fields:
                    await self._client.eval(_ADD, 1, self._health_key(target), HEALTH_TTL, *fields)
        except FAILURES as exc:
            log.warning("federated targets' health not shared in Redis: %s", exc)

    async def read_health(self, targets: Iterable[str]) -> dict[str, Seen] | None:
        """What every replica saw of `targets` (None: Redis did not answer)."""
        names = list(targets)
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.hgetall(self._health_key(name))
                stored = await pipe.execute()
        except FAILURES as exc:
            log.warning("federated targets' health not read from Redis: %s", exc)
            return None
        return {name: seen_from(found) for name, found in zip(names, stored, strict=True)}
