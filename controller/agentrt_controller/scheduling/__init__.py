"""Pure scheduling, admission and routing policies (docs/architecture.md, design rule 1).

Nothing in this package awaits, does I/O or reads a clock: the controller service
(``agentrt_controller.service``) and the simulator (``agentrt_sim``) both drive the *same* objects,
passing
``now_s`` in. ``api`` defines the seams; ``dispatcher`` combines them; ``tenancy`` puts any
scheduler inside weighted fair shares between tenants (docs/tenancy.md).
"""
