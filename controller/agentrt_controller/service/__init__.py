"""The controller service: OpenAI-compatible, program-aware (docs/controller.md).

Embed it::

    async with serve_controller(ControllerConfig(port=0, backends=(BackendSpec(url),))) as url:
        ...  # url is http://127.0.0.1:<port>
"""

from agentrt_controller.service.config import ControllerConfig, load_config
from agentrt_controller.service.http.app import ControllerApp
from agentrt_controller.service.http.server import run_controller, serve_controller

__all__ = ["ControllerApp", "ControllerConfig", "load_config", "run_controller", "serve_controller"]
