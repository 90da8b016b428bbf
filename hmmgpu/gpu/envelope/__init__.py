"""Envelope rescoring on the GPU (``rescore_isolated_domain``): the posterior decoding and
optimal accuracy kernel (:mod:`.source`) and its launch (:mod:`.launch`)."""
