"""Print "OTHERS N": how many processes on this fake host run ARGV[1] (a script name),
found by the host's token in their environment (podctl/fake/vm/hosts.py, TOKEN_VAR)."""

import os
import sys

token = os.environ["PODCTL_FAKE_HOST_TOKEN"].encode()
count = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read().split(b"\0")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
    except OSError:
        continue
    # its script: the interpreter's first argument (this one names it as its second)
    if int(pid) != os.getpid() and b"PODCTL_FAKE_HOST_TOKEN=" + token in environ and \
            len(cmdline) > 1 and cmdline[1].endswith(sys.argv[1].encode()):
        count += 1
print(f"OTHERS {count}", flush=True)
