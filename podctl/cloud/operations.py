"""Long-running operations read as plain JSON, never by unpacking their metadata.

The real Cloud TPU service types every operation's metadata
`google.cloud.common.OperationMetadata` (recorded in k8s-config-connector's
mockgcp/mocktpu/testdata/node/crud/_http.log), a message that google-cloud-tpu's
REST transport does not register. Its generated create, delete and
get-operation calls parse each reply with json_format, which must unpack every
`Any` it meets and fails on a type it has no descriptor for: the very first
reply of a create is lost, and so is the delete meant to clean up.

Two ways out were weighed. Registering that one type (installing
google-cloud-common) fixes today's name only: any other metadata type Google
sends, now or later, breaks podctl again, and a slice bills meanwhile. podctl
needs nothing from the metadata, so instead it sends the calls that answer with
an operation itself, over the client's own authorized session and host (the
same credentials, token refresh and endpoint), turns an HTTP error into
google-api-core's exception exactly as the generated transport does
(`from_http_response`), and reads the reply as JSON: `name`, `done` (absent
means false, as in the first reply of a create), `error` (a google.rpc.Status)
and `response`. The metadata is never looked at; a response is parsed only into
the type podctl asked for, with unknown fields ignored (a Node without `health`
is a Node), and an Empty or unknown response stays JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc
from google.protobuf import json_format

if TYPE_CHECKING:
    from google.cloud import tpu_v2
else:  # imported at first use: lazy_tpu.py says why
    from podctl.cloud.lazy_tpu import tpu_v2

API_VERSION = "v2"


@dataclass(frozen=True)
class Operation:
    """A google.longrunning.Operation as podctl needs it; metadata deliberately left out."""

    name: str
    done: bool = False
    error: dict[str, Any] | None = None  # google.rpc.Status as JSON: code, message, details
    response: dict[str, Any] | None = None  # with its "@type"

    @classmethod
    def from_json(cls, data: Any) -> Operation:
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            raise gexc.GoogleAPICallError(f"the Cloud TPU API answered with no operation: {data!r:.200}")
        error = data.get("error")
        response = data.get("response")
        return cls(name=data["name"], done=bool(data.get("done", False)),
                   error=error if isinstance(error, dict) else None,
                   response=response if isinstance(response, dict) else None)

    def exception(self) -> gexc.GoogleAPICallError | None:
        """The operation's error as google-api-core's exception for its code, or None."""
        if self.error is None:
            return None
        code = int(self.error.get("code", 2) or 2)  # 2: UNKNOWN
        details = self.error.get("details") or []
        error: gexc.GoogleAPICallError = gexc.from_grpc_status(code, str(self.error.get("message", "")),
                                                               details=details)
        return error

    def response_type(self) -> str:
        return str((self.response or {}).get("@type", "")).rsplit("/", 1)[-1]

    def node(self) -> tpu_v2.Node | None:
        """The finished operation's Node, when it carries one."""
        if self.response_type() != "google.cloud.tpu.v2.Node":
            return None
        node: tpu_v2.Node = _parse(tpu_v2.Node, self.response)
        return node

    def queued_resource(self) -> tpu_v2.QueuedResource | None:
        if self.response_type() != "google.cloud.tpu.v2.QueuedResource":
            return None
        queued: tpu_v2.QueuedResource = _parse(tpu_v2.QueuedResource, self.response)
        return queued


def _parse(message_type: Any, data: dict[str, Any] | None) -> Any:
    body = {k: v for k, v in (data or {}).items() if k != "@type"}
    return message_type.from_json(json.dumps(body), ignore_unknown_fields=True)


def to_body(message: Any) -> dict[str, Any]:
    """A proto-plus message as the JSON body the REST API takes (lowerCamelCase, enums by
    name, default values left out, as the generated transport sends them)."""
    body: dict[str, Any] = json_format.MessageToDict(type(message).pb(message))
    return body


def send(client: tpu_v2.TpuClient, method: str, path: str, *, params: dict[str, Any] | None = None,
         body: dict[str, Any] | None = None, timeout: float | None = None) -> Operation:
    """One HTTP call to /v2/PATH that answers with an operation (blocking)."""
    transport = client.transport
    session = transport._session  # type: ignore[attr-defined]  # the generated transport's AuthorizedSession
    host = transport._host  # "https://tpu.googleapis.com" or an override, scheme included
    headers = {"Content-Type": "application/json"} if body is not None else {}
    response = session.request(
        method, f"{host}/{API_VERSION}/{path}", params={"alt": "json", **(params or {})},
        data=json.dumps(body) if body is not None else None, headers=headers, timeout=timeout)
    if response.status_code >= 400:
        raise gexc.from_http_response(response)
    try:
        data = response.json()
    except ValueError as e:
        raise gexc.GoogleAPICallError(f"the Cloud TPU API answered with no JSON ({e})") from e
    return Operation.from_json(data)
