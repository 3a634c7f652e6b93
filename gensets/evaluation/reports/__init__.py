"""Reports, one module each, registered with ``@REPORTS.register(kind)`` (gensets.registry): ``gensets report
KIND`` is generated from the registry, each report adding its own arguments (:class:`base.Report`)."""
