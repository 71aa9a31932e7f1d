"""The ways a run reaches its hosts (channels), chosen once by name from a registry.

    REGISTRY: name -> ChannelKind (base.py). A new channel is one module with a `KIND`
    and one line here; `--via`, the settings' `via`, `queue add --via`, the run's record
    (`via`) and every later stop, halt and stack capture go by that name.

`auto` is no channel: it picks, per run, the first kind in AUTO_ORDER that the slice can
take (`unusable`), that may carry what the run carries (`carries_secrets`) and whose
hosts answer it now (`answers`); SSH, which every slice has, comes last.
"""

from __future__ import annotations

from dataclasses import replace

from podctl.base.errors import InvalidValueError
from podctl.cloud.types import SliceInfo
from podctl.jobs.channels import boot, ssh
from podctl.jobs.channels.base import Channel, ChannelKind, Reach

AUTO = "auto"
# What a run takes when neither --via nor the settings say: the watchers where they answer
# (a denial of the nodes' roles is read from them before anything is uploaded: boot.py's
# check_access), else SSH, said in one line.
DEFAULT = AUTO
REGISTRY: dict[str, ChannelKind] = {
    ssh.KIND.name: ssh.KIND,
    boot.KIND.name: boot.KIND,
}
AUTO_ORDER = ("boot", "ssh")  # auto: the first of these that the slice takes and that answers


def choices() -> tuple[str, ...]:
    """Every name `--via` takes: auto, then the registry's, sorted."""
    return (AUTO, *sorted(REGISTRY))


def checked(name: str, where: str = "--via") -> str:
    """NAME, if it is auto or a registered channel; else the one line saying what is
    (WHERE: --via, PODCTL_VIA, via (podctl.toml), queue add --via)."""
    if name != AUTO and name not in REGISTRY:
        *first, last = choices()
        raise InvalidValueError(f"{where} {name!r} is no way to reach the hosts: use "
                                f"{', '.join(first)} or {last}.")
    return name


def recorded(via: object) -> ChannelKind:
    """The kind a run's record names (`via`); a record from before channels were
    recorded, or naming one this podctl does not know, was started over SSH."""
    return REGISTRY.get(via, REGISTRY["ssh"]) if isinstance(via, str) else REGISTRY["ssh"]


def candidates(info: SliceInfo, asked: str | None, configured: str | None = None, *,
               secrets: bool = False, signing_key: bool = False,
               configured_from: str = "PODCTL_VIA") -> list[ChannelKind]:
    """The kinds a run on INFO may take, in the order to try them: ASKED (--via), else
    CONFIGURED (the settings'), else DEFAULT. A named one comes alone, refused in one line
    where INFO cannot take it or the run carries a SIGNING_KEY it may not; auto's list
    holds only those that can (SSH always can).

    SECRETS (--env values): auto takes only a kind that carries secrets (a kind that does
    not keeps them in GCS, where the bucket's readers see them); a kind named takes them
    as it documents. SIGNING_KEY (--build-on host): host 0 signs what it builds with a key
    that may reach the hosts only over a kind that carries secrets (in GCS a bucket writer
    could read it and re-sign a changed environment): refused by any other, named or not."""
    name = checked(asked, "--via") if asked else checked(configured or DEFAULT, configured_from)
    if name == AUTO:
        return [REGISTRY[n] for n in AUTO_ORDER if n in REGISTRY
                and (REGISTRY[n].carries_secrets or not (secrets or signing_key))
                and REGISTRY[n].unusable(info) is None]
    kind = REGISTRY[name]
    if signing_key and not kind.carries_secrets:
        raise InvalidValueError(f"--build-on host needs --via ssh (host 0's signing key travels "
                                f"only over SSH, not through --via {name}); drop --build-on host "
                                "to build the environment here, or run with --via ssh.")
    why = kind.unusable(info)
    if why is not None:
        raise InvalidValueError(why)
    return [kind]


async def choose(reach: Reach, asked: str | None, configured: str | None = None, *,
                 secrets: bool = False, signing_key: bool = False,
                 configured_from: str = "PODCTL_VIA") -> ChannelKind:
    """The one kind a run on REACH's slice takes (candidates): a named one as it is;
    auto's first whose hosts answer now, else its last (SSH, which says itself why a
    host cannot be reached). Where auto passes over a kind the slice could not take or
    whose hosts do not answer, it says why in one line (REACH's notice); not for a run
    whose secrets a kind may not carry (documented, and the same every time)."""
    found = candidates(reach.info, asked, configured, secrets=secrets, signing_key=signing_key,
                       configured_from=configured_from)
    if len(found) == 1 and (asked or configured or DEFAULT) != AUTO:
        return found[0]
    passed: list[str] = []
    for name in AUTO_ORDER:
        kind = REGISTRY.get(name)
        if kind is None or kind is found[-1]:
            break
        if kind not in found:  # the slice cannot take it, or it may not carry the run's secrets
            why = kind.unusable(reach.info)
            if why is not None:
                passed.append(f"not --via {name}: {why}")
            continue
        why = await kind.answers(reach)
        if why is None:
            return kind
        passed.append(f"not --via {name}: {why}")
    if passed:
        reach.notice(f"starting over {found[-1].name}; " + "; ".join(passed))
    return found[-1]


def open_channel(kind: ChannelKind, reach: Reach) -> Channel:
    """KIND's channel for one run on REACH's slice; a kind that needs SSH is told which
    others would reach the hosts without it (said after a host SSH cannot reach)."""
    without = tuple(sorted(n for n, k in REGISTRY.items()
                           if n != kind.name and not k.needs_ssh and k.unusable(reach.info) is None))
    return kind.open(replace(reach, without_ssh=without))
