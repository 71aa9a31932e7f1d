"""Which of a slice's hosts answer now: one SSH connection and `true` each, with a
short deadline and no retries. An elastic run asks it of every slice after an attempt
ended, to tell a slice whose hosts are gone (left out of the next attempt) from one
whose processes only died (relaunched on), and later, whether a lost slice is back."""

from __future__ import annotations

import asyncio
import contextlib

from podctl.base.errors import HostKeyError
from podctl.cloud.types import SliceInfo
from podctl.jobs.channels.base import HostAccess
from podctl.jobs.launch import targets_for
from podctl.jobs.ssh import Fleet, Target

ANSWER_SECONDS = 10.0  # a live host's sshd answers in well under a second


async def answering_hosts(info: SliceInfo, access: HostAccess, timeout: float = ANSWER_SECONDS,
                          only: set[int] | None = None) -> set[int]:
    """The positions (in INFO.hosts; of ONLY, default all) of the hosts that ran `true`
    over SSH within TIMEOUT. A host whose key is not the pinned one raises (never taken
    for gone)."""
    user = await access.login()

    async def one(target: Target) -> bool:
        fleet = Fleet([target], access.private_key, access.pins, user=user, attempts=1,
                      connect_timeout=timeout)
        try:
            async with asyncio.timeout(timeout * 2):
                async with fleet:
                    await fleet.each(lambda conn, _t: conn.run("true", check=False))
            return True
        except HostKeyError:
            raise
        except Exception:  # noqa: BLE001 - refused, timed out, cut: it does not answer
            return False
        finally:
            with contextlib.suppress(Exception):
                await fleet.close()

    targets = [t for t in targets_for(info, access.ssh_port) if only is None or t.index in only]
    answers = await asyncio.gather(*(one(t) for t in targets))
    return {t.index for t, ok in zip(targets, answers) if ok}
