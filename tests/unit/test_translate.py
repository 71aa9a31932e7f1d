"""Google's errors become podctl's where they enter; the ones that pass are retried."""

import pytest
import requests
from google.api_core import exceptions as gexc

from podctl.cloud.translate import translate, translate_operation_error
from podctl.cloud.types import SliceInfo
from podctl.base.errors import (
    AlreadyExistsError, CloudError, NotFoundError, PermissionDeniedError, QuotaExceededError,
    StockoutError, TransientError,
)

QUOTA = {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []}
RATE = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED"}


@pytest.mark.parametrize("error, kind", [
    (gexc.NotFound("x"), NotFoundError),
    (gexc.Conflict("x"), AlreadyExistsError),
    (gexc.Forbidden("x"), PermissionDeniedError),
    (gexc.TooManyRequests("Quota limit 'TPUV5P' has been exceeded", details=[QUOTA]), QuotaExceededError),
    (gexc.TooManyRequests("Rate Limit Exceeded"), TransientError),
    (gexc.TooManyRequests("Quota exceeded for quota metric 'Read requests' per minute"), TransientError),
    (gexc.TooManyRequests("Quota exceeded", details=[RATE], error_info=RATE), TransientError),
    (gexc.ServiceUnavailable("x"), TransientError),
    (requests.ConnectionError("reset"), TransientError),
    (gexc.BadRequest("bad"), CloudError),
])
def test_translation(error, kind):
    translated = translate(error, "doing it")
    assert type(translated) is kind and "doing it" in str(translated)


def test_stockout_is_operation_code_8():
    error = gexc.from_grpc_status(8, "There is no more capacity in the zone")
    assert isinstance(translate_operation_error(error, "creating x", "us-east5-a"), StockoutError)
    assert "--queued" in str(translate_operation_error(error, "creating x", "us-east5-a"))


def test_foreign_tpu_types_still_list():
    info = SliceInfo(name="v5e", project="p", zone="z", kind="node", state="READY",
                     accelerator_type="v5litepod-16", topology="4x4", num_slices=1, tier="on-demand",
                     created=0.0, labels={})
    assert info.chips == 16 and info.to_json()["chips"] == 16


def _from_fake(error) -> gexc.GoogleAPICallError:
    """The fake's ApiError as google-api-core parses it off the wire."""
    import json

    response = requests.Response()
    response.status_code = error.http_status
    response._content = json.dumps({"error": {"code": error.http_status, "message": error.message,
                                              "status": error.status, "details": error.details}}).encode()
    response.request = requests.Request("GET", "http://127.0.0.1/v2/x").prepare()
    return gexc.from_http_response(response)


def test_real_only_errors_read_from_their_error_info():
    from podctl.base.errors import ApiDisabledError
    from podctl.fake.api import access

    what = "listing nodes in projects/p1/locations/us-central1-a"
    denied = translate(_from_fake(access.denied("nodes.list", "projects/p1/locations/us-central1-a")), what)
    assert type(denied) is PermissionDeniedError
    assert "tpu.nodes.list" in str(denied) and "add-iam-policy-binding p1" in str(denied)
    disabled = translate(_from_fake(access.service_disabled("p1")), what)
    assert type(disabled) is ApiDisabledError and "--project p1" in str(disabled)
    assert "https://console.developers.google.com/apis/api/tpu.googleapis.com" in str(disabled)
    assert type(translate(_from_fake(access.rate_limited("p1")), what)) is TransientError
