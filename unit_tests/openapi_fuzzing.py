"""What every schemathesis run over RaftQ's API document shares: how requests are generated,
which checks each answer must pass, and the rules on 5xx and on refused requests.

Used by the in-process fuzzing of the manager and the broker (their tests) and by the run
against a real cluster through its load balancer (``unit_tests/cluster``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import orjson
import schemathesis
from schemathesis import Case, GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.specs.openapi.schemas import OpenApiSchema

from protocol.errors import proves_nothing_done
from protocol.openapi import Node, api_document

CHECKS = [
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
MODES = {("GET", "/logs")}
"""Operations whose parameters are the union of two modes (pop, fetch): a request in one
mode ignores the other's parameters, so an invalid one of those is rightly not refused and
``negative_data_rejection`` does not apply."""


def fuzz_schema(node: Node, examples_per_operation: int) -> OpenApiSchema:
    """The node's document, set up to generate valid and invalid requests, the same ones on
    every run. Security parameters are not generated: each test sends credentials of its own
    (who may call what is tested in ``unit_tests/cluster/test_access.py``)."""
    schema = schemathesis.openapi.from_dict(api_document(node))
    schema.config.generation.update(
        modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
        max_examples=examples_per_operation,
        deterministic=True,
        with_security_parameters=False,
    )
    schema.config.phases.update(phases=["examples", "fuzzing"])
    # What counts as refusing an invalid request: RaftQ answers 413 for a body, batch,
    # message or key over its limit; 5xx are judged by ``judge``.
    schema.config.checks.negative_data_rejection.expected_statuses = [
        "400",
        "404",
        "409",
        "413",
        "429",
        "5xx",
    ]
    return schema


def judge(case: Case[Any], response: Any, allowed_5xx: Callable[[int, object], bool]) -> bool:
    """Check the answer against the document, and a 5xx against ``allowed_5xx(status,
    body)``; whether the answer proves that nothing was done (every 4xx, the refusals)."""
    in_modes = (case.method, case.path) in MODES
    checks = [c for c in CHECKS if not (in_modes and c is negative_data_rejection)]
    case.validate_response(response, checks=checks)
    is_json = response.headers.get("content-type") == ["application/json"]
    body = orjson.loads(response.content) if is_json else None
    status = int(response.status_code)
    if status >= 500:
        assert allowed_5xx(status, body), f"{status} {body}"
    return status >= 400 and proves_nothing_done(status, body)


def error_code_in(codes: Collection[int]) -> Callable[[int, object], bool]:
    """``allowed_5xx`` for answers whose error code is one of ``codes``."""

    def allowed(_status: int, body: object) -> bool:
        return isinstance(body, dict) and body.get("error_code") in codes

    return allowed
