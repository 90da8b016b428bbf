"""The stochastic-trace ensemble of clustered regions on the GPU (``region_trace_ensemble``'s
sampling): the kernel (:mod:`.source`), its launch (:mod:`.launch`) and the domain definition
stage that uses it (:mod:`.stages`)."""
