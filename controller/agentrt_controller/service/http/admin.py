"""Admin endpoints: list, add and remove backends while the controller runs.

* ``GET /agentrt/v1/backends`` → ``{"backends": [...]}``: per backend its state (``up``,
  ``down``, ``open``, ``half_open``, ``draining``), circuit breaker, in-flight calls, load,
  capabilities and models (:meth:`~agentrt_controller.service.core.pool.BackendState.describe`).
* ``POST /agentrt/v1/backends`` with a backend table ``{"url", "kind"?, "id"?, "priority"?,
  "options"?}`` (the config file's form) or ``{"spec": "URL,kind=...,priority=on"}`` → 201 with
  the new backend, probed once (its ``state`` says whether it is up). 400 for a bad spec, 409
  for an id in use.
* ``DELETE /agentrt/v1/backends/{id}`` → 202 ``{"backend": {..., "state": "draining"}}`` while
  calls are in flight (they finish; no new ones are sent), 200 ``{"removed": true}`` when it
  was idle and is gone; 404 for an unknown id.

Changing the set of backends changes where users' prompts go, and the listing shows backend
URLs, so all three need ``Authorization: Bearer <admin_token>`` when ``admin_token`` is
configured, and otherwise are accepted from loopback clients only (403 else). Tenants' API
keys do not open them (docs/security.md, "Identity").
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentrt.errors import ConfigError
from agentrt.protocol import EVENTS_PREFIX
from agentrt_controller.backends.api import Backend
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service.core.facade import ControllerCore
from agentrt_controller.service.errors import BackendNotFound, BadRequest, Conflict, Forbidden
from agentrt_controller.service.http.endpoints import guarded, read_small_body

__all__ = ["BACKENDS_PATH", "admin_routes", "is_privileged"]

BACKENDS_PATH = EVENTS_PREFIX + "/backends"
_MAX_BODY_BYTES = 16 * 1024
_LOOPBACK = ("127.", "::1", "::ffff:127.")


def is_privileged(request: Request, token: str | None) -> bool:
    """Whether the caller may read operational details (backend addresses, per-tenant
    counts): it presents ``Authorization: Bearer <token>`` (the admin token, when set) or
    connects from loopback (docs/security.md, "What the probes show")."""
    host = request.client.host if request.client is not None else ""
    if host.startswith(_LOOPBACK):
        return True
    if token is None:
        return False
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.encode(), token.encode())


def _authorize(request: Request, token: str | None, what: str = "changing backends") -> None:
    if token is None:
        host = request.client.host if request.client is not None else ""
        if not host.startswith(_LOOPBACK):
            raise Forbidden(f"{what} is allowed from loopback clients only")
        return
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.encode(), token.encode()):
        raise Forbidden(f"{what} needs Authorization: Bearer <admin_token>")


async def _spec(request: Request) -> BackendSpec:
    body = await read_small_body(request, _MAX_BODY_BYTES, "backend spec")
    try:
        data: Any = json.loads(body or b"{}")
    except ValueError:
        raise BadRequest("the body must be a JSON object") from None
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    try:
        if set(data) == {"spec"} and isinstance(data["spec"], str):
            spec = BackendSpec.parse(data["spec"])
        else:
            spec = BackendSpec.from_mapping(data)
    except ConfigError as exc:
        raise BadRequest(str(exc), param=_param_of(str(exc))) from exc
    if spec.kv_events is not None:  # subscribers start with the controller only
        raise BadRequest(
            "kv_events is read at start-up only; configure it there", param="kv_events"
        )
    return spec


#: How the backend spec's errors name their field (backends/spec.py, backends/factory.py).
_PARAMS = (
    (re.compile(r"backend option (\w+)"), None),
    (re.compile(r"backend URL"), "url"),
    (re.compile(r"backend kind"), "kind"),
    (re.compile(r"unknown options"), "options"),
    (re.compile(r"must be key=value"), "spec"),
)


def _param_of(message: str) -> str | None:
    """The request field a backend spec error is about (``priority``, ``url``, ``kind``,
    ``options``...): a bad ``priority=maybe`` names ``priority``; ``None`` when unknown."""
    for pattern, param in _PARAMS:
        match = pattern.search(message)
        if match is not None:
            return param or match.group(1)
    return None


def admin_routes(
    core: ControllerCore, build: Callable[[BackendSpec], Backend], admin_token: str | None
) -> list[Route]:
    """The Starlette routes of the backend admin API for ``core``; ``build`` makes a backend
    from a spec (raising :class:`ConfigError` for unknown kinds and options)."""

    async def listing(request: Request) -> Response:
        _authorize(request, admin_token, "listing backends")
        return JSONResponse({"backends": core.describe_backends()})

    async def add(request: Request) -> Response:
        _authorize(request, admin_token)
        spec = await _spec(request)
        if core.has_backend(spec.backend_id):
            raise Conflict(f"a backend with id {spec.backend_id!r} exists", param="id")
        try:
            backend = build(spec)
        except ConfigError as exc:
            raise BadRequest(str(exc), param=_param_of(str(exc))) from exc
        try:
            described = await core.add_backend(backend)
        except ConfigError as exc:  # added concurrently under the same id
            await backend.aclose()
            raise Conflict(str(exc), param="id") from exc
        return JSONResponse({"backend": described}, status_code=201)

    async def remove(request: Request) -> Response:
        _authorize(request, admin_token)
        backend_id = request.path_params["backend_id"]
        try:
            draining = core.remove_backend(backend_id)
        except KeyError:
            raise BackendNotFound(f"no backend {backend_id!r}", param="backend_id") from None
        if draining is None:
            return JSONResponse({"backend_id": backend_id, "removed": True})
        return JSONResponse({"backend": draining}, status_code=202)

    return [
        Route(BACKENDS_PATH, guarded(listing), methods=["GET"]),
        Route(BACKENDS_PATH, guarded(add), methods=["POST"]),
        Route(BACKENDS_PATH + "/{backend_id}", guarded(remove), methods=["DELETE"]),
    ]
