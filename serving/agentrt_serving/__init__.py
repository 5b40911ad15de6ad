"""What agentrt's two servers, the controller and the engine emulator, share: the hardened HTTP
surface, the reading of an OpenAI Responses API request, and the hardware profiles.

* :mod:`agentrt_serving.hardening` — :class:`~agentrt_serving.hardening.HardenedApp`, the ASGI
  guard in front of a server's application (limits, input checks, the catch-all 500), and
  :class:`~agentrt_serving.hardening.HttpLimits`;
* :mod:`agentrt_serving.uvicorn_server` — uvicorn's httptools (or h11) protocol with a
  request-head timeout and a head size limit, the uvicorn settings that apply the limits, a
  listening socket and an embedded server run in the caller's event loop;
* :mod:`agentrt_serving.asgi` — the ASGI callable types;
* :mod:`agentrt_serving.responses_chat` — an OpenAI Responses API request as the chat request
  it amounts to (the emulator serves by it, the controller hashes and pins by it);
* :mod:`agentrt_serving.hardware` — :class:`~agentrt_serving.hardware.HardwareProfile` and the
  named profiles (the emulator's step-time model and the controller's cost model read them).

Each server keeps its own error envelope (the controller OpenAI's, the emulator vLLM's): it
passes an ``error_body`` builder to :class:`~agentrt_serving.hardening.HardenedApp`. This
distribution imports no other agentrt member. See docs/security.md, "Hardened HTTP surface".
"""

from agentrt_serving.hardening import INTERNAL_ERROR_MESSAGE, HardenedApp, HttpLimits

__all__ = ["INTERNAL_ERROR_MESSAGE", "HardenedApp", "HttpLimits"]
