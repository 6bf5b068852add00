"""The Redis of the commands that read or write jobttl's schedule (the operator commands, `jobttl resync`).

`connect` refuses a Redis that holds no jobttl schedule (unless --force); `redis_problem` says
why a Redis could not be used, naming it, and, for a `make run` stack, why it may not answer.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from jobttl.core.runtime.config import Settings
from jobttl.core.services import operations
from jobttl.core.store import redisconn


def connect(settings: Settings, force: bool = False) -> operations.Operations:
    from jobttl.core.services import graph
    from jobttl.core.store import upgrade

    shared = graph.build(settings, redisconn.CLI, metrics=False)
    ops = shared.operations()
    if not force:
        ops.check_redis()  # a Redis with no jobttl schedule is probably not the one meant
    upgrade.ensure(shared.redis, shared.audit.tombstone_seconds, mark=False)
    return ops


def redis_problem(exc: Exception, settings: Settings) -> int:
    """Exit 1, naming the Redis used: the usual cause is JOBTTL_REDIS_URL pointing elsewhere."""
    if isinstance(exc, operations.UnknownRedis):
        print(
            f"jobttl: {exc} (JOBTTL_REDIS_URL={redisconn.redacted(settings.redis_url)}); --force to use it anyway",
            file=sys.stderr,
        )
    else:
        print(
            f"jobttl: cannot use Redis (JOBTTL_REDIS_URL={redisconn.redacted(settings.redis_url)}): {exc}",
            file=sys.stderr,
        )
        from redis.exceptions import ConnectionError as RedisConnectionError

        hint = stale_run_env(settings.redis_url) if isinstance(exc, RedisConnectionError) else None
        if hint:
            print(f"jobttl: {hint}", file=sys.stderr)
    return 1


def stale_run_env(redis_url: str) -> str | None:
    """Why a Redis of `make run` may not answer: the shell sourced the `.run/env` of an earlier run.

    `.run/env` names itself in JOBTTL_RUN_ENV; without it (a file from before that), `.run/env`
    in the current folder is looked at. `make run` picks new ports each time and removes the
    file when it stops, so a file now gone or naming another Redis says what happened.
    """
    sourced = os.environ.get("JOBTTL_RUN_ENV")
    path = Path(sourced) if sourced else Path(".run", "env")
    try:
        text = path.read_text()
    except FileNotFoundError:
        if not sourced:
            return None
        return (
            f"{path} is gone: the `make run` that wrote it has stopped. Start it again (`make run`), "
            f"then `. {path}` again in this shell"
        )
    except OSError:
        return None
    current = _redis_url_in(text)
    if current is None or current == redis_url:
        return None
    if not sourced:  # this shell may never have sourced it: say what the file says, no more
        return (
            f"{path} names another Redis, {current} (`make run` picks new ports each time it starts): "
            f"if that is the one meant, `. {path}` (or use .run/bin/jobttl, which reads it each time)"
        )
    return (
        f"`make run` was restarted since this shell sourced {path}: its Redis is now at {current}. "
        f"Run `. {path}` again (or use .run/bin/jobttl, which reads it each time)"
    )


def _redis_url_in(env_file: str) -> str | None:
    """The JOBTTL_REDIS_URL a `.run/env` exports (its last export), if any."""
    current = None
    for line in env_file.splitlines():
        words = shlex.split(line, comments=True)
        if len(words) == 2 and words[0] == "export" and words[1].startswith("JOBTTL_REDIS_URL="):
            current = words[1].partition("=")[2]
    return current
