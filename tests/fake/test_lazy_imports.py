"""What a podctl process imports before it needs it: google.cloud.tpu_v2 (with its async
client, gRPC and, through google-api-core, aiohttp: ~0.4 s of CPU) only when a command
talks to the Cloud TPU API; the fake's daemon client (`podctl fake status`, twice per CLI
test) without asyncio. Run in a fresh interpreter: the test process has imported them all."""

from __future__ import annotations

import json
import subprocess
import sys


def _loaded_after(statement: str, prefixes: tuple[str, ...]) -> list[str]:
    code = (f"import json, sys; {statement}; "
            f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(out.stdout)
    return loaded


def test_steps_and_the_cli_modules_do_not_import_the_tpu_client() -> None:
    statement = ("import podctl.steps, podctl.steps.session, podctl.cloud.connect, "
                 "podctl.cli.job_cmds, podctl.cli.slice_cmds, podctl.cli.ckpt_cmds")
    assert _loaded_after(statement, ("google.cloud.tpu_v2", "aiohttp")) == []


def test_opening_a_provider_makes_no_client_until_a_request() -> None:
    statement = ("from podctl.cloud.connect import api_for_endpoint; "
                 "api = api_for_endpoint('http://127.0.0.1:9'); api.close()")
    assert _loaded_after(statement, ("google.cloud.tpu_v2",)) == []
    statement = ("from podctl.cloud.connect import api_for_endpoint; "
                 "api = api_for_endpoint('http://127.0.0.1:9'); api.client")
    assert "google.cloud.tpu_v2" in _loaded_after(statement, ("google.cloud.tpu_v2",))


def test_the_fake_daemons_client_side_imports_no_asyncio() -> None:
    assert _loaded_after("import podctl.fake.admin.daemon, podctl.cli.fake_cmds", ("asyncio",)) == []
