"""How the fake Cloud TPU API writes its resources on the wire.

The world keeps resources as JSON dicts in the API's own shape (lowerCamelCase,
enums by name) plus private keys that start with "_". On the way out the private
keys are dropped and, when the client asked for `$alt=json;enum-encoding=int`
(the google-cloud-tpu REST client always does), enum names become the integers
of cloud_tpu.proto. On the way in both forms are accepted, as Google's servers do.
"""

from __future__ import annotations

from typing import Any

NODE_STATE = {
    "STATE_UNSPECIFIED": 0, "CREATING": 1, "READY": 2, "RESTARTING": 3, "REIMAGING": 4,
    "DELETING": 5, "REPAIRING": 6, "STOPPED": 8, "STOPPING": 9, "STARTING": 10,
    "PREEMPTED": 11, "TERMINATED": 12, "HIDING": 13, "HIDDEN": 14, "UNHIDING": 15,
    "UNKNOWN": 16,
}
NODE_HEALTH = {
    "HEALTH_UNSPECIFIED": 0, "HEALTHY": 1, "TIMEOUT": 3, "UNHEALTHY_TENSORFLOW": 4,
    "UNHEALTHY_MAINTENANCE": 5,
}
SYMPTOM_TYPE = {  # Symptom.SymptomType (cloud_tpu.proto v2)
    "SYMPTOM_TYPE_UNSPECIFIED": 0, "LOW_MEMORY": 1, "OUT_OF_MEMORY": 2, "EXECUTE_TIMED_OUT": 3,
    "MESH_BUILD_FAIL": 4, "HBM_OUT_OF_MEMORY": 5, "PROJECT_ABUSE": 6,
}
API_VERSION = {"API_VERSION_UNSPECIFIED": 0, "V1_ALPHA1": 1, "V1": 2, "V2_ALPHA1": 3, "V2": 4}
ACCELERATOR_TYPE = {
    "TYPE_UNSPECIFIED": 0, "V2": 2, "V3": 4, "V4": 7, "V5LITE_POD": 9, "V5P": 10, "V6E": 11,
}
QR_STATE = {
    "STATE_UNSPECIFIED": 0, "CREATING": 1, "ACCEPTED": 2, "PROVISIONING": 3, "FAILED": 4,
    "DELETING": 5, "ACTIVE": 6, "SUSPENDING": 7, "SUSPENDED": 8, "WAITING_FOR_RESOURCES": 9,
}
STATE_INITIATOR = {"STATE_INITIATOR_UNSPECIFIED": 0, "USER": 1, "SERVICE": 2}

# (dict key, enum table) for the enum fields of each resource, by nesting.
_NODE_ENUMS = {"state": NODE_STATE, "health": NODE_HEALTH, "apiVersion": API_VERSION}
_CONFIG_ENUMS = {"type": ACCELERATOR_TYPE}
_QR_STATE_ENUMS = {"state": QR_STATE, "stateInitiator": STATE_INITIATOR}


def enum_name(table: dict[str, int], value: Any) -> str | None:
    """An enum given by name or number -> its name; None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return next((name for name, number in table.items() if number == value), None)
    if isinstance(value, str) and value in table:
        return value
    return None


def _public(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if not k.startswith("_")}


def _encode_enums(data: dict[str, Any], fields: dict[str, dict[str, int]], ints: bool) -> dict[str, Any]:
    out = dict(data)
    for key, table in fields.items():
        if key in out and ints:
            out[key] = table[out[key]]
    return out


def render_node(node: dict[str, Any], ints: bool) -> dict[str, Any]:
    out = _encode_enums(_public(node), _NODE_ENUMS, ints)
    if "acceleratorConfig" in out:
        out["acceleratorConfig"] = _encode_enums(out["acceleratorConfig"], _CONFIG_ENUMS, ints)
    if ints and out.get("symptoms"):
        out["symptoms"] = [{**s, "symptomType": SYMPTOM_TYPE.get(s.get("symptomType"), 0)}
                           for s in out["symptoms"]]
    return out


def render_accelerator_type(accelerator_type: dict[str, Any], ints: bool) -> dict[str, Any]:
    configs = [_encode_enums(c, _CONFIG_ENUMS, ints) for c in accelerator_type["acceleratorConfigs"]]
    return {**accelerator_type, "acceleratorConfigs": configs}


def render_queued_resource(qr: dict[str, Any], ints: bool) -> dict[str, Any]:
    out = _public(qr)
    out["state"] = _encode_enums(out["state"], _QR_STATE_ENUMS, ints)
    specs = []
    for spec in out["tpu"]["nodeSpec"]:
        spec = dict(spec)
        spec["node"] = render_node(spec["node"], ints)
        specs.append(spec)
    out["tpu"] = {"nodeSpec": specs}
    return out


def render_operation(op: dict[str, Any], ints: bool) -> dict[str, Any]:
    out = _public(op)
    if not out.get("done"):
        out.pop("done", None)  # proto3 JSON leaves a false `done` out: recorded so
    response = out.get("response")
    if response and response.get("@type", "").endswith("tpu.v2.Node"):
        out["response"] = {"@type": response["@type"], **render_node(_strip_type(response), ints)}
    elif response and response.get("@type", "").endswith("tpu.v2.QueuedResource"):
        out["response"] = {
            "@type": response["@type"],
            **render_queued_resource(_strip_type(response), ints),
        }
    return out


def _strip_type(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "@type"}


def error_body(http_status: int, status: str, message: str, details: list[Any] | None = None) -> dict[str, Any]:
    """Google's JSON error shape, which google-api-core turns into its exceptions."""
    error: dict[str, Any] = {"code": http_status, "message": message, "status": status}
    if details:
        error["details"] = details
    return {"error": error}
