"""Google's errors become podctl's where they enter; the ones that pass are retried."""

import pytest
import requests
from google.api_core import exceptions as gexc

from podctl.cloud.translate import translate, translate_operation_error
from podctl.cloud.types import SliceInfo
from podctl.errors import (
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
