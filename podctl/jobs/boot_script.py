"""The startup script every slice podctl makes carries: it starts the host's watcher.

The guest environment runs a node's `startup-script` as root at every boot (and after a
maintenance); this one writes host_watch.py and host_pin.py, what it accepts (inlined:
nothing is fetched, the script holds no secret and is the same for every slice) to
/var/lib/podctl/ when root, else to ~/.podctl/watch/ (0700), and starts it detached:
- as root with systemd: `systemd-run --unit=podctl-watch --property=Restart=on-failure
  --property=KillMode=process python3 /var/lib/podctl/host_watch.py /var/lib/podctl`
  (a transient unit: systemd restarts a watcher that dies; KillMode=process, so that
  a restart of the watcher leaves the agents it started running); its log is the
  unit's journal (`journalctl -u podctl-watch`);
- else: `setsid nohup python3 DIR/host_watch.py DIR &`, its output appended to
  DIR/watch.log.
A fake host (PODCTL_FAKE_HOST=1) takes the second path whoever runs it: the fake's
hosts share one machine, and the fake runs every host's script as the same user.
Running the script again is harmless: a second watcher finds the first's lock and
exits at once (host_watch.lock), and a second `systemd-run` of a running unit fails
and is ignored.

`boot_metadata()` is what cloud/create merges into every node's metadata: the script,
its version (`podctl-boot`: podctl starts runs through the watcher only on slices
whose version it knows) and the guest attributes switch the watcher reports through.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from podctl.host import run_layout

WATCH_SOURCE = (Path(__file__).parent.parent / "host" / "host_watch.py").read_text()
PIN_SOURCE = (Path(__file__).parent.parent / "host" / "host_pin.py").read_text()  # imported by the watcher
_EOF = "PODCTL_HOST_WATCH_EOF"
MAX_BYTES = 48 * 1024  # far under metadata's 256 KiB a value (design 26, F7); the watcher and its pin check

_TEMPLATE = r"""#!/bin/bash
# podctl: start this host's watcher (podctl/jobs/boot_script.py). Static: no secrets.
set -u
# say KEY VALUE: guest attribute podctl/KEY, as the watcher's report() writes it, with bash
# alone (no curl, no python3: what is missing may be the cause to say)
say() {
  local at="${GCE_METADATA_HOST:-metadata.google.internal}" host port
  host=${at%:*}; port=80; [ "$host" != "$at" ] && port=${at##*:}
  (LC_ALL=C; exec 3<>"/dev/tcp/$host/$port" || exit 1
   printf 'PUT /computeMetadata/v1/instance/guest-attributes/GUEST_NS/%s HTTP/1.0\r\n' "$1" >&3
   printf 'Host: %s\r\nMetadata-Flavor: Google\r\nContent-Length: %s\r\n\r\n%s' "$at" "${#2}" "$2" >&3
   timeout 5 cat <&3 > /dev/null) 2> /dev/null || true
}
fail() { say watch "failed $1"; echo "podctl: $1" >&2; exit 1; }
if [ "$(id -u)" = 0 ] && [ -z "${PODCTL_FAKE_HOST:-}" ]; then
  root=1; d=/var/lib/podctl
else
  root=; d="${HOME:-$(getent passwd "$(id -un)" | cut -d: -f6)}/WATCH_DIR"
fi
command -v python3 > /dev/null || fail "no python3 on this host's PATH ($PATH)"
umask 077
why=$(mkdir -p "$d" 2>&1 && chmod 700 "$d" 2>&1) || fail "cannot make $d: ${why:-mkdir failed}"
# put FILE: its stdin (a heredoc) to $d/FILE, whole or not at all, or the watch's failure
put() {
  local t="$d/$1.$$" why
  why=$(cat 2>&1 > "$t") || { rm -f "$t"; fail "cannot write $t: ${why:-write failed}"; }
  why=$(mv -f "$t" "$d/$1" 2>&1) || fail "cannot write $d/$1: ${why:-mv failed}"
}
put host_pin.py <<'EOF_MARK'
PIN_SOURCE
EOF_MARK
put host_watch.py <<'EOF_MARK'
WATCH_SOURCE
EOF_MARK
if [ -n "$root" ] && [ -d /run/systemd/system ] && command -v systemd-run > /dev/null; then
  # a second run: the unit exists already, systemd-run fails, the watcher runs on
  systemd-run --unit=podctl-watch --property=Restart=on-failure --property=KillMode=process \
    python3 "$d/host_watch.py" "$d" > /dev/null 2>&1 || true
else
  cd "$d" || fail "cannot enter $d"
  { setsid nohup python3 "$d/host_watch.py" "$d" >> "$d/watch.log" 2>&1 < /dev/null & } 2> /dev/null \
    || fail "cannot start the watcher (its log $d/watch.log cannot be written)"
fi
exit 0
"""

if any(line.strip() == _EOF for line in (WATCH_SOURCE + PIN_SOURCE).splitlines()):  # pragma: no cover
    raise RuntimeError(f"host_watch.py or host_pin.py holds the heredoc's end marker {_EOF}")


def _ended(source: str) -> str:
    return source if source.endswith("\n") else source + "\n"


BOOT_SCRIPT = (_TEMPLATE.replace("WATCH_DIR", run_layout.WATCH_DIR)
               .replace("GUEST_NS", run_layout.GUEST_NAMESPACE).replace("EOF_MARK", _EOF)
               .replace("PIN_SOURCE\n", _ended(PIN_SOURCE)).replace("WATCH_SOURCE\n", _ended(WATCH_SOURCE)))
BOOT_VERSION = hashlib.sha256(BOOT_SCRIPT.encode()).hexdigest()[:12]


def boot_metadata() -> dict[str, str]:
    """The node metadata every slice podctl creates carries (beside its ssh-keys)."""
    return {"startup-script": BOOT_SCRIPT, run_layout.BOOT_KEY: BOOT_VERSION,
            "enable-guest-attributes": "TRUE"}
