"""Evaluation protocols, one module each, registered with ``@PROTOCOLS.register(name)`` (gensets.registry):
how a model's outputs on a dataset become prediction rows and metrics. The interface is
:class:`~gensets.evaluation.protocols.base.Protocol`; :func:`~gensets.evaluation.protocols.base.choose` picks
one when ``--protocol`` is not given."""
