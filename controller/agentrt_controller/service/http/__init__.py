"""The controller's HTTP layer: it parses requests and answers them; everything else is the
core's (:class:`~agentrt_controller.service.core.facade.ControllerCore`)."""
